package api

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/platform/httpx"
	"example.com/shop/services/order/internal/events"
	"example.com/shop/services/order/internal/order"
)

// errNotUUID is the reason given for a body field that is not a canonical UUID.
var errNotUUID = errors.New("must be a UUID in its canonical form, such as 0190a7c4-7c1e-7d2a-9f3b-5a8c2e1d4b6f")

// createOrderRequest is the body of POST /orders. Values are strings so that
// each one is checked here and a bad one is reported with its field name.
type createOrderRequest struct {
	CustomerID string        `json:"customer_id"`
	Lines      []lineRequest `json:"lines"`
}

// lineRequest is one line of createOrderRequest.
type lineRequest struct {
	ProductID string `json:"product_id"`
	Quantity  string `json:"quantity"`
}

// toOrder checks the request and builds the draft order it asks for. A value that
// is not acceptable is a KindValidation *httpx.Error whose Errors locate every such
// value by its JSON Pointer, such as "/lines/1/quantity".
func (req createOrderRequest) toOrder(id uuid.UUID, now time.Time) (*order.Order, error) {
	var bad []httpx.FieldError
	reject := func(pointer string, err error) {
		bad = append(bad, httpx.FieldError{Pointer: pointer, Detail: err.Error()})
	}
	customerID, err := parseUUID(req.CustomerID)
	if err != nil {
		reject("/customer_id", err)
	}
	var lines []order.Line
	if len(req.Lines) > order.MaxLines {
		reject("/lines", order.ErrTooManyLines)
	} else {
		lines = make([]order.Line, len(req.Lines))
		for i, l := range req.Lines {
			at := fmt.Sprintf("/lines/%d/", i)
			productID, err := parseUUID(l.ProductID)
			if err != nil {
				reject(at+"product_id", err)
			}
			q, err := order.ParseQuantity(l.Quantity)
			switch {
			case l.Quantity == "":
				reject(at+"quantity", order.ErrRequired)
			case err != nil:
				reject(at+"quantity", err)
			}
			lines[i] = order.Line{ProductID: productID, Quantity: q}
		}
	}
	if len(bad) > 0 {
		return nil, invalid(bad)
	}
	o, err := order.New(id, customerID, lines, now)
	if fe := (*order.FieldError)(nil); errors.As(err, &fe) {
		return nil, invalid([]httpx.FieldError{{Pointer: pointer(fe.Field), Detail: fe.Err.Error()}})
	}
	return o, err
}

// invalid is the KindValidation error of the values at fault.
func invalid(bad []httpx.FieldError) *httpx.Error {
	detail := bad[0].Pointer + ": " + bad[0].Detail
	if len(bad) > 1 {
		detail = fmt.Sprintf("%d request values are not acceptable (see errors)", len(bad))
	}
	return httpx.Invalid(detail, bad...)
}

// pointer turns the path of an order.FieldError ("lines[2].quantity") into the JSON
// Pointer of that value in the request body ("/lines/2/quantity").
func pointer(field string) string {
	return "/" + strings.NewReplacer("[", "/", "]", "", ".", "/").Replace(field)
}

// parseUUID accepts only the canonical 36-character form; "" is missing.
func parseUUID(s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.Nil, order.ErrRequired
	}
	id, err := httpx.ParseUUID(s)
	if err != nil {
		return uuid.Nil, errNotUUID
	}
	return id, nil
}

// orderResponse is an order as the API shows it (services/order/api/openapi.yaml).
type orderResponse struct {
	ID         string               `json:"id"`
	CustomerID string               `json:"customer_id"`
	Status     string               `json:"status"`
	Version    int                  `json:"version"`
	Lines      []lineResponse       `json:"lines"`
	Rejection  *contracts.Rejection `json:"rejection,omitempty"` // only on a rejected order
	CreatedAt  string               `json:"created_at"`
	UpdatedAt  string               `json:"updated_at"`
}

// lineResponse is one line of orderResponse; quantity has exactly 3 decimals.
type lineResponse struct {
	ProductID string `json:"product_id"`
	Quantity  string `json:"quantity"`
}

func toResponse(o *order.Order) orderResponse {
	lines := o.Lines()
	out := orderResponse{
		ID:         o.ID().String(),
		CustomerID: o.CustomerID().String(),
		Status:     string(o.Status()),
		Version:    o.Version(),
		Lines:      make([]lineResponse, len(lines)),
		CreatedAt:  httpx.FormatTime(o.CreatedAt()),
		UpdatedAt:  httpx.FormatTime(o.UpdatedAt()),
	}
	for i, l := range lines {
		out.Lines[i] = lineResponse{ProductID: l.ProductID.String(), Quantity: l.Quantity.String()}
	}
	if r := o.Rejection(); r != nil {
		c := events.RejectionContract(*r)
		out.Rejection = &c
	}
	return out
}
