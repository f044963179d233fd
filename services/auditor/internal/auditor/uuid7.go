package auditor

import (
	"encoding/binary"
	"time"

	"github.com/google/uuid"
)

// Event ids and order ids are UUID v7: their first 48 bits are the Unix time in
// milliseconds at which they were made, so a range of ids is a range of time that the
// primary key index serves.

// minID returns the smallest UUID v7 of the millisecond of t.
func minID(t time.Time) uuid.UUID {
	var u uuid.UUID
	ms := uint64(max(t.UnixMilli(), 0))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], ms<<16)
	copy(u[:6], b[:6])
	return u
}

// maxID returns the largest UUID v7 of the millisecond of t.
func maxID(t time.Time) uuid.UUID {
	u := minID(t)
	for i := 6; i < 16; i++ {
		u[i] = 0xff
	}
	return u
}

// uuidTime returns the millisecond a UUID v7 was made at.
func uuidTime(u uuid.UUID) time.Time {
	var b [8]byte
	copy(b[2:], u[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:])))
}
