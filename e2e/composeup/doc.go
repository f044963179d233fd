// Package composeup tests docker-compose.yml for real: `docker compose up` on a
// Docker engine, orders placed through the published ports, the auditor's live
// page opened in a headless Chromium, the ledger checked, the compose demo run,
// order's leading relay killed (its standby takes over), then both relays, and
// both restarted, and `docker compose down -v`.
//
// Its test is behind the build tag compose and needs a Docker engine, so
// `make test` does not run it: `make compose-test` does (deploy/compose-test.sh
// starts dockerd, builds the images and sets the variables it reads).
package composeup
