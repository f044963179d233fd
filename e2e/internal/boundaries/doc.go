// Package boundaries holds the test that enforces the dependency rules of the
// layout: contracts imports no other part of the project, platform never
// imports a service, and services never import each other.
package boundaries
