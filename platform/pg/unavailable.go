package pg

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err says that the database could not be used
// at all, as opposed to a statement it refused: the caller should wait and
// try again rather than blame the request. It is true for
//   - a *pgconn.ConnectError: the server did not answer, refused the
//     connection, or refused this database (ALLOW_CONNECTIONS false, too
//     many connections, starting up or shutting down);
//   - a server error of class 08 (connection exception), 57P01
//     (admin_shutdown, a terminated backend), 57P02 (crash_shutdown),
//     57P03 (cannot_connect_now) or 53300 (too_many_connections);
//   - a deadline (context.DeadlineExceeded, pgconn.Timeout) while
//     connecting, waiting for a pooled connection or waiting for an answer,
//     and any network error or EOF of a dropped connection.
//
// A plain context.Canceled is not unavailability: the caller gave up.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
