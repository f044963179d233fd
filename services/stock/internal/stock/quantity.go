package stock

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidQuantity means a text is not a quantity stock can keep: a plain decimal zero or
// greater with at most 9 integer digits and at most 3 fraction digits (numeric(12,3)).
var ErrInvalidQuantity = errors.New("invalid quantity")

// MaxQuantity is the largest Quantity a numeric(12,3) column holds: 999999999.999.
const MaxQuantity Quantity = 999_999_999_999

// Quantity is an exact amount of a product in thousandths ("2.500" is 2500). Quantities
// are added and compared as integers, never as floats; the sum of any two quantities of
// at most MaxQuantity fits.
type Quantity int64

// ParseQuantity parses s, a plain decimal such as "10", "2.5" or "0.000" (no sign, no
// exponent, no spaces, at least one digit before the point), and returns an error wrapping
// ErrInvalidQuantity when s is not such a decimal, has more than 3 fraction digits or more
// than 9 integer digits.
func ParseQuantity(s string) (Quantity, error) {
	invalid := func(reason string) (Quantity, error) {
		return 0, fmt.Errorf("%w: %q %s", ErrInvalidQuantity, s, reason)
	}
	if len(s) > 32 {
		return invalid("is longer than 32 characters")
	}
	intPart, frac, hasPoint := strings.Cut(s, ".")
	if intPart == "" || !digits(intPart) || (hasPoint && (frac == "" || !digits(frac))) {
		return invalid("is not a plain decimal number such as \"10.000\"")
	}
	if len(frac) > 3 {
		return invalid("has more than 3 decimal places")
	}
	intPart = strings.TrimLeft(intPart, "0")
	if len(intPart) > 9 {
		return invalid("has more than 9 integer digits")
	}
	var q Quantity
	for _, c := range intPart + frac + strings.Repeat("0", 3-len(frac)) {
		q = q*10 + Quantity(c-'0')
	}
	return q, nil
}

func digits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// String returns q with exactly three fraction digits, such as "2.500" or "0.000".
func (q Quantity) String() string {
	sign := ""
	if q < 0 {
		sign, q = "-", -q
	}
	return fmt.Sprintf("%s%d.%03d", sign, q/1000, q%1000)
}
