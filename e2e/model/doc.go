// Package model checks the Promela model of the event journey,
// model/journey.pml, with spin: the model must hold and each of its mutants
// (one rule broken) must be refuted (docs/model.md).
package model
