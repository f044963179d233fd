package main

import (
	"strings"
	"unicode"
)

// eventTitle is an event's title in contracts/asyncapi.yaml, its constant's words in a
// sentence: order.order.placed.v1 is "Order placed", stock.reservation.confirmed.v1
// "Stock reservation confirmed".
func eventTitle(event string) string {
	var b strings.Builder
	for i, r := range camel(event) {
		switch {
		case i == 0:
			r = unicode.ToUpper(r)
		case unicode.IsUpper(r):
			b.WriteByte(' ')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
