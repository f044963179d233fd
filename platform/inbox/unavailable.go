package inbox

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"example.com/shop/platform/pg"
)

// unavailable reports whether err says that the database could not do the work,
// whatever the event: it refuses or dropped the connection, is shutting down or
// starting, has no connection or resource to spare, is a read-only standby, or gave
// up the transaction for contention with concurrent ones (deadlock, serialization
// failure: the event is simply tried again). Such an error is not the event's fault
// and must not spend one of its attempts (docs/architecture.md, step 5 of the flow). Any other
// error, a constraint violation raised by a handler's statement say, is the event's.
// It is pg.Unavailable (connection refused or lost, shutdown, timeouts) widened by
// what a consumer may also wait out: every code of classes 53 and 57P, contention,
// a read-only standby, a database refusing connections, and what pgx calls safe to
// retry.
func unavailable(err error) bool {
	if pg.Unavailable(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", // serialization failure, deadlock detected
			"25006", // read-only SQL transaction: connected to a standby after a failover
			"55000": // object not in prerequisite state: the database refuses connections
			return true
		}
		// insufficient resources (too many connections, disk full); admin or crash
		// shutdown, cannot connect now
		return strings.HasPrefix(pgErr.Code, "53") || strings.HasPrefix(pgErr.Code, "57P")
	}
	return pgconn.SafeToRetry(err)
}
