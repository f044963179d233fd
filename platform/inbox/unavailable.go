package inbox

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// unavailable reports whether err says that the database could not do the work,
// whatever the event: it refuses or dropped the connection, is shutting down or
// starting, has no connection or resource to spare, is a read-only standby, or gave
// up the transaction for contention with concurrent ones (deadlock, serialization
// failure: the event is simply tried again). Such an error is not the event's fault
// and must not spend one of its attempts (docs/architecture.md rule 5). Any other
// error, a constraint violation raised by a handler's statement say, is the event's.
func unavailable(err error) bool {
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection exception
			return true
		case strings.HasPrefix(pgErr.Code, "53"): // insufficient resources (too many connections, disk full)
			return true
		case strings.HasPrefix(pgErr.Code, "57P"): // admin or crash shutdown, cannot connect now
			return true
		}
		switch pgErr.Code {
		case "40001", "40P01", // serialization failure, deadlock detected
			"25006", // read-only SQL transaction: connected to a standby after a failover
			"55000": // object not in prerequisite state: the database refuses connections
			return true
		}
		return false
	}
	var netErr net.Error
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}
