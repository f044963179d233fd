// Package e2e is the end-to-end suite of the shop: its tests build the real
// binaries, start them as processes on fresh PostgreSQL databases and a fresh
// RabbitMQ vhost, and check through HTTP and SQL that no event is lost and
// none takes effect twice. Run it with `make e2e`.
package e2e
