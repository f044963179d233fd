package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/platform/backoff"
)

// products is how many tracked products the load orders from.
const products = 20

// clients is how many clients the load runs.
const clients = 4

// load is the running load: clients that each create an order of one or two
// tracked products (and at times an untracked one), place it, and cancel one
// in ten right away; each request is retried until it is answered, on the
// other order API after a failure.
type load struct {
	wg        sync.WaitGroup
	done      chan struct{} // closed when every client has ended
	issued    atomic.Int64
	errors    atomic.Int64
	cancelled atomic.Int64
}

// stock makes the tracked products, with enough on hand for about 60 % of
// the units the run should order: the first orders are confirmed, then more
// and more are rejected, and cancellations free units again.
func (r *run) stock(ctx context.Context) error {
	expect := r.opts.Orders
	if expect <= 0 {
		expect = r.opts.Rate * int(r.opts.Faults/time.Second)
	}
	onHand := max(50, expect*8/100)
	for range products {
		id := uuid.NewString()
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := r.rig.API.PutStock(pctx, id, fmt.Sprintf("%d.000", onHand))
		cancel()
		if err != nil {
			return fmt.Errorf("tracked product: %w", err)
		}
		r.products = append(r.products, id)
	}
	return nil
}

func (r *run) startLoad(ctx context.Context) *load {
	l := &load{done: make(chan struct{})}
	apis := []*system.Process{r.rig.Sys.OrderAPI, r.rig.Process(contracts.ProducerOrder + "-2")}
	pause := time.Duration(clients) * time.Second / time.Duration(r.opts.Rate)
	for i := range clients {
		rng := rand.New(rand.NewPCG(r.opts.Seed, uint64(100+i)))
		l.wg.Go(func() { l.client(ctx, r, apis, i, rng, pause) })
	}
	go func() { l.wg.Wait(); close(l.done) }()
	return l
}

func (l *load) client(ctx context.Context, r *run, apis []*system.Process, k int, rng *rand.Rand, pause time.Duration) {
	api := func() *system.Client { return r.rig.API.Via(apis[k%len(apis)]) }
	retry := func() bool {
		l.errors.Add(1)
		k++
		return backoff.Sleep(ctx, 200*time.Millisecond) == nil
	}
	for ctx.Err() == nil {
		if r.opts.Orders > 0 && l.issued.Add(1) > int64(r.opts.Orders) {
			return
		}
		var o system.Order
		for {
			var err error
			if o, err = api().CreateOrder(ctx, uuid.NewString(), r.lines(rng)); err == nil {
				break
			}
			if !retry() {
				return
			}
		}
		for tried := false; ; tried = true {
			st, err := api().Place(ctx, o.ID)
			if err == nil && (st == http.StatusOK || (tried && st == http.StatusConflict)) {
				r.rig.NotePlaced(o.ID)
				break
			}
			if err == nil && st == http.StatusNotFound {
				r.rig.NoteVanished()
				break
			}
			if !retry() {
				return
			}
		}
		if rng.IntN(10) == 0 {
			for {
				st, err := api().Cancel(ctx, o.ID)
				if err == nil && st < 500 {
					if st == http.StatusOK {
						l.cancelled.Add(1)
					}
					break
				}
				if !retry() {
					return
				}
			}
		}
		if backoff.Sleep(ctx, pause) != nil {
			return
		}
	}
}

// lines is an order's lines: one tracked product of 1 to 3 units, and either
// a second tracked product or an untracked one.
func (r *run) lines(rng *rand.Rand) []system.Line {
	a := rng.IntN(len(r.products))
	out := []system.Line{{ProductID: r.products[a], Quantity: fmt.Sprintf("%d", 1+rng.IntN(3))}}
	if rng.IntN(2) == 0 {
		b := (a + 1 + rng.IntN(len(r.products)-1)) % len(r.products)
		return append(out, system.Line{ProductID: r.products[b], Quantity: fmt.Sprintf("%d", 1+rng.IntN(2))})
	}
	return append(out, system.Line{ProductID: uuid.NewString(), Quantity: "1"})
}

// sample reads product_stock every 500 ms until ctx ends and counts the
// samples in which a product reserves more than it has on hand (a sample the
// database cannot answer, during a failover, is skipped).
func (r *run) sample(ctx context.Context) {
	for backoff.Sleep(ctx, 500*time.Millisecond) == nil {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var over int
		err := r.rig.DBs.Stock.QueryRow(qctx, `SELECT count(*) FROM product_stock WHERE reserved > on_hand`).Scan(&over)
		cancel()
		if err != nil {
			continue
		}
		r.mu.Lock()
		r.res.Samples++
		if over > 0 {
			r.res.Oversold++
		}
		r.mu.Unlock()
	}
}

// finalChecks counts, once the system settled, the orders still waiting, the
// acknowledged orders gone, and the units reserved against those of the
// confirmed orders.
func (r *run) finalChecks(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.rig.DBs.Order.QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'placed'`).Scan(&r.res.Waiting); err != nil {
		return fmt.Errorf("waiting orders: %w", err)
	}
	missing, err := r.rig.MissingPlaced(ctx)
	if err != nil {
		return err
	}
	r.res.Missing = len(missing) + r.rig.Vanished()
	if err := r.rig.DBs.Stock.QueryRow(ctx, `SELECT trim_scale(coalesce(sum(reserved), 0))::text FROM product_stock`).Scan(&r.res.Reserved); err != nil {
		return fmt.Errorf("units reserved: %w", err)
	}
	if err := r.rig.DBs.Order.QueryRow(ctx, `SELECT trim_scale(coalesce(sum(l.quantity), 0))::text
		FROM order_line l JOIN orders o ON o.id = l.order_id
		WHERE o.status = 'confirmed' AND l.product_id = ANY($1::uuid[])`, r.products).Scan(&r.res.Confirmed); err != nil {
		return fmt.Errorf("units confirmed: %w", err)
	}
	return nil
}
