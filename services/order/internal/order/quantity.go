package order

import (
	"fmt"
	"strings"
)

// Quantity limits, matching order_line.quantity numeric(12,3) and the contract's quantity
// schema.
const (
	// MaxIntegerDigits is the largest number of integer digits a Quantity may have.
	MaxIntegerDigits = 9
	// Scale is the number of fraction digits a Quantity is normalised to.
	Scale = 3
	// maxQuantityInput bounds the raw text ParseQuantity looks at, leading zeros included.
	maxQuantityInput = 32
)

// Quantity is an exact decimal amount greater than zero with at most MaxIntegerDigits
// integer digits and at most Scale fraction digits, kept in its normalised text form
// ("2.000"). It never passes through a float. The zero value is not a valid Quantity.
type Quantity struct {
	text string
}

// ParseQuantity parses s, a plain decimal such as "2", "2.5" or "0.125" (no sign, no
// exponent, no spaces, at least one digit before the point), and normalises it to Scale
// fraction digits without leading zeros: "2" -> "2.000", "007.5" -> "7.500".
//
// It returns an error wrapping ErrInvalidQuantity when s is not such a decimal, has more
// than Scale fraction digits or more than MaxIntegerDigits integer digits, or is zero.
func ParseQuantity(s string) (Quantity, error) {
	invalid := func(reason string) (Quantity, error) {
		return Quantity{}, fmt.Errorf("%w: %s", ErrInvalidQuantity, reason)
	}
	if s == "" {
		return invalid("is empty")
	}
	if len(s) > maxQuantityInput {
		return invalid(fmt.Sprintf("is longer than %d characters", maxQuantityInput))
	}
	if s[0] == '-' {
		return invalid(fmt.Sprintf("%q is negative; a quantity must be greater than zero", s))
	}
	intPart, frac, hasPoint := strings.Cut(s, ".")
	if intPart == "" || !allDigits(intPart) || (hasPoint && (frac == "" || !allDigits(frac))) {
		return invalid(fmt.Sprintf("%q is not a plain decimal number such as \"2.000\"", s))
	}
	if len(frac) > Scale {
		return invalid(fmt.Sprintf("%q has more than %d decimal places", s, Scale))
	}
	intPart = strings.TrimLeft(intPart, "0")
	if len(intPart) > MaxIntegerDigits {
		return invalid(fmt.Sprintf("%q has more than %d integer digits", s, MaxIntegerDigits))
	}
	frac += strings.Repeat("0", Scale-len(frac))
	if intPart == "" {
		if frac == strings.Repeat("0", Scale) {
			return invalid("must be greater than zero")
		}
		intPart = "0"
	}
	return Quantity{text: intPart + "." + frac}, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String returns the normalised form, such as "2.000"; "" for the zero value.
func (q Quantity) String() string { return q.text }

// IsZero reports whether q is the zero value, which no valid line holds.
func (q Quantity) IsZero() bool { return q.text == "" }
