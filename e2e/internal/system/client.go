package system

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"example.com/shop/contracts"
)

// Line is one order line as the order API shows it.
type Line struct {
	ProductID string `json:"product_id"`
	Quantity  string `json:"quantity"`
}

// Order is the order API's view of an order.
type Order struct {
	ID         string `json:"id"`
	CustomerID string `json:"customer_id"`
	Status     string `json:"status"`
	Version    int    `json:"version"`
	Lines      []Line `json:"lines"`
	// Rejection is stock's reason, on a rejected order only.
	Rejection *contracts.Rejection `json:"rejection,omitempty"`
}

// Reservation is the stock API's view of one reserved line.
type Reservation struct {
	ID        string `json:"id"`
	OrderID   string `json:"order_id"`
	ProductID string `json:"product_id"`
	Quantity  string `json:"quantity"`
	Status    string `json:"status"` // held, or released once the order is cancelled
}

// Held returns the reservations of rs that still hold their stock.
func Held(rs []Reservation) []Reservation {
	var held []Reservation
	for _, r := range rs {
		if r.Status == "held" {
			held = append(held, r)
		}
	}
	return held
}

// OrderStatus is shipping's versioned copy of an order's status.
type OrderStatus struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	Version int    `json:"version"`
}

// Shipment is shipping's shipment for an order.
type Shipment struct {
	ID      string `json:"id"`
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
}

// Client calls the HTTP APIs of a running System.
type Client struct {
	sys   *System
	http  *http.Client
	order *Process // the order API it calls: sys.OrderAPI unless Via
}

// Client returns an HTTP client for s with a 10 s timeout per request.
func (s *System) Client() *Client {
	return &Client{sys: s, http: &http.Client{Timeout: 10 * time.Second}, order: s.OrderAPI}
}

// Via returns a copy of c that sends the order API's requests to order (a
// replica of the order service) instead.
func (c *Client) Via(order *Process) *Client {
	v := *c
	v.order = order
	return &v
}

// CreateOrder posts a new draft order; it returns the order when the API
// answers 201, else an error with the status and body.
func (c *Client) CreateOrder(ctx context.Context, customerID string, lines []Line) (Order, error) {
	var o Order
	body, _ := json.Marshal(map[string]any{"customer_id": customerID, "lines": lines})
	status, err := c.do(ctx, http.MethodPost, c.order.Addr, "/orders", body, &o)
	if err == nil && status != http.StatusCreated {
		err = fmt.Errorf("create order: status %d", status)
	}
	return o, err
}

// Place posts /orders/{id}/place and returns the HTTP status (200, 404, 409).
func (c *Client) Place(ctx context.Context, id string) (int, error) {
	return c.do(ctx, http.MethodPost, c.order.Addr, "/orders/"+id+"/place", nil, nil)
}

// Cancel posts /orders/{id}/cancel and returns the HTTP status.
func (c *Client) Cancel(ctx context.Context, id string) (int, error) {
	return c.do(ctx, http.MethodPost, c.order.Addr, "/orders/"+id+"/cancel", nil, nil)
}

// Order gets /orders/{id}.
func (c *Client) Order(ctx context.Context, id string) (Order, int, error) {
	var o Order
	status, err := c.do(ctx, http.MethodGet, c.order.Addr, "/orders/"+id, nil, &o)
	return o, status, err
}

// PutStock sets the on-hand quantity of a product in stock (a decimal string such
// as "1.000"), which makes it tracked; an answer other than 200 is an error.
func (c *Client) PutStock(ctx context.Context, productID, onHand string) error {
	body, _ := json.Marshal(map[string]string{"on_hand": onHand})
	status, err := c.do(ctx, http.MethodPut, c.sys.Stock.Addr, "/products/"+productID+"/stock", body, nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("put stock of %s: status %d", productID, status)
	}
	return err
}

// Stock is the stock API's view of a tracked product's quantities, decimal strings
// with three fraction digits.
type Stock struct {
	ProductID string `json:"product_id"`
	OnHand    string `json:"on_hand"`
	Reserved  string `json:"reserved"`
	Available string `json:"available"`
}

// Stock gets /products/{id}/stock; an answer other than 200 (404: untracked) is an error.
func (c *Client) Stock(ctx context.Context, productID string) (Stock, error) {
	var st Stock
	status, err := c.do(ctx, http.MethodGet, c.sys.Stock.Addr, "/products/"+productID+"/stock", nil, &st)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("stock of %s: status %d", productID, status)
	}
	return st, err
}

// Reservations gets stock's reservations of one order, held and released.
func (c *Client) Reservations(ctx context.Context, orderID string) ([]Reservation, error) {
	var rs []Reservation
	status, err := c.do(ctx, http.MethodGet, c.sys.Stock.Addr, "/reservations?order_id="+orderID, nil, &rs)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("reservations: status %d", status)
	}
	return rs, err
}

// OrderStatus gets shipping's copy of an order's status; status 404 means
// shipping has not heard of the order yet.
func (c *Client) OrderStatus(ctx context.Context, orderID string) (OrderStatus, int, error) {
	var s OrderStatus
	status, err := c.do(ctx, http.MethodGet, c.sys.Shipping.Addr, "/order-status/"+orderID, nil, &s)
	return s, status, err
}

// Shipment gets shipping's shipment of an order (404 when none).
func (c *Client) Shipment(ctx context.Context, orderID string) (Shipment, int, error) {
	var s Shipment
	status, err := c.do(ctx, http.MethodGet, c.sys.Shipping.Addr, "/shipments/"+orderID, nil, &s)
	return s, status, err
}

// do sends one request and decodes a 2xx JSON body into out (when not nil).
func (c *Client) do(ctx context.Context, method, addr, path string, body []byte, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %q: %w", method, path, raw, err)
		}
	}
	return resp.StatusCode, nil
}

// AuditReport is the auditor's GET /audit.
type AuditReport struct {
	Unaccounted      map[string]int `json:"unaccounted"`
	UnaccountedTotal int            `json:"unaccounted_total"`
	Events           []struct {
		EventID   string   `json:"event_id"`
		EventName string   `json:"event_name"`
		OrderID   string   `json:"order_id"`
		Consumers []string `json:"consumers"`
	} `json:"events"`
	// DeadLettered counts, per consumer, the events it dead-lettered that await a
	// decision: not delivered.
	DeadLettered      map[string]int `json:"dead_lettered"`
	DeadLetteredTotal int            `json:"dead_lettered_total"`
	DeadLetters       []struct {
		EventID  string `json:"event_id"`
		OrderID  string `json:"order_id"`
		Consumer string `json:"consumer"`
		Reason   string `json:"reason"`
		Attempts int    `json:"attempts"`
	} `json:"dead_letters"`
	DeadLetterCopiesMissing map[string]int `json:"dead_letter_copies_missing"`
	Audited                 int64          `json:"audited"`
	LagSeconds              float64        `json:"lag_seconds"`
	Cycles                  int64          `json:"cycles"`
	LastError               string         `json:"last_error"`
}

// Audit gets the auditor's report of its last cycle.
func (c *Client) Audit(ctx context.Context) (AuditReport, error) {
	var r AuditReport
	if c.sys.Auditor == nil {
		return r, fmt.Errorf("audit: the system runs no auditor")
	}
	status, err := c.do(ctx, http.MethodGet, c.sys.Auditor.Addr, "/audit", nil, &r)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("audit: status %d", status)
	}
	return r, err
}
