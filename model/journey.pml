/*
 * journey.pml: the whole journey of an order's events, checked by spin over
 * every interleaving (docs/model.md explains each process and how to run it).
 *
 *   client      places two orders and may cancel the first      (rule 1)
 *   relays      two order relays lead the order outbox's one partition in
 *               turn, one stock relay drains stock's outbox       (rule 2)
 *   broker      queues that may lose an unconfirmed message, lose a confirm,
 *               duplicate, and redeliver what a crashed consumer held
 *   consumers   stock, shipping and order (the answer leg) through their
 *               inboxes                                   (rules 3, 4, 6, 7)
 *   operator    replays one published row of the order outbox  (rule 5)
 *
 * Every fault (a crash, a freeze, a broker failure) draws on one budget of
 * MAXF faults. Once it is spent the database and the broker stay up, so
 * every run ends; the monitor at the bottom checks the end of every run:
 * that is "eventually", under the fairness that the faults stop.
 *
 * One rule broken, one switch (spin -DMUTANT_...): each must be refuted.
 *   MUTANT_MARK_BEFORE_CONFIRM  the relay marks what it sent, confirmed or not
 *   MUTANT_ACK_BEFORE_COMMIT    the consumer acks before its transaction commits
 *   MUTANT_KEY_OUTSIDE_TX       the inbox key commits in a transaction of its own
 *   MUTANT_TWO_LEADERS          two relays lead one partition, no batch lock
 *   MUTANT_NO_VERSION_GUARD     a state copy takes any version, older included
 */

#ifndef MAXF
#define MAXF 2          /* faults in one run: crashes, freezes, broker failures */
#endif
/* Which faults a run may draw (-DFAULTS=...): a sum of these. */
#define F_RELAY    1    /* a relay killed, or frozen in a batch */
#define F_BROKER   2    /* a message lost unconfirmed, a confirm lost, a duplicate */
#define F_CONSUMER 4    /* a consumer killed after its commit, before its ack */
#ifndef FAULTS
#define FAULTS 7
#endif
#define RELAY_FAULT    ((FAULTS & F_RELAY) && faults < MAXF)
#define BROKER_FAULT   ((FAULTS & F_BROKER) && faults < MAXF)
#define CONSUMER_FAULT ((FAULTS & F_CONSUMER) && faults < MAXF)
#define STOCK_ON_HAND 1 /* units of the one product both orders want */

/* Order statuses (services/order/internal/order/order.go). */
#define NEW       0
#define PLACED    1
#define CONFIRMED 2
#define REJECTED  3
#define CANCELLED 4

/* Event kinds, one per outbox row (contracts: the event names). */
#define EV_NONE      0  /* no row */
#define EV_PLACED    1  /* order.order.placed.v1 */
#define EV_CONFIRMED 2  /* order.order.confirmed.v1 */
#define EV_REJECTED  3  /* order.order.rejected.v1 */
#define EV_CANCELLED 4  /* order.order.cancelled.v1 */
#define EV_ANS_OK    5  /* stock.reservation.confirmed.v1 */
#define EV_ANS_NO    6  /* stock.reservation.rejected.v1 */

/*
 * Outbox rows. Order o's event of version v is row o*3+v-1 of the order
 * outbox (rows 0..5); stock's answer to order o is row 6+o of stock's outbox.
 * The relays publish a batch in row order, which is each order's version order.
 */
#define OB_ORDER 0
#define OB_STOCK 1
#define FIRST(ob) (ob == OB_ORDER -> 0 : 6)
#define LAST(ob)  (ob == OB_ORDER -> 5 : 7)
#define ROW(o, v) ((o) * 3 + (v) - 1)
#define ANSWER(o) (6 + (o))

byte kind[8];     /* EV_NONE until the row is committed */
bit  published[8];/* published_at is set (committed) */
byte rowLock[8];  /* 1 + the relay whose batch transaction holds the row, 0: none */
bit  sent[8];     /* a copy of the row has reached the queues */

/* Relays: 0 and 1 share the order outbox, 2 drains stock's. */
#define NRELAYS 3
bit  leading[NRELAYS];  /* the relay's lock session holds the partition's lead lock */
byte batchLock[2];      /* 1 + the relay whose batch transaction holds it, 0: free */

/* Consumers (contracts.Consumers()): each queue is bound to these events. */
#define STOCK 0
#define SHIP  1
#define ORDER 2
#define BOUND(c, k) ((c == STOCK && (k == EV_PLACED || k == EV_CANCELLED)) || \
                     (c == SHIP && k >= EV_PLACED && k <= EV_CANCELLED) || \
                     (c == ORDER && (k == EV_ANS_OK || k == EV_ANS_NO)))
byte queued[24];  /* copies of row r ready in consumer c's queue: queued[c*8+r] */
bit  key[24];     /* processed_event holds (c, r), committed */
byte applied[24]; /* times c's handlers committed their effect for row r */

/* The services' state. */
byte status[2];   /* orders.status */
byte version[2];  /* orders.version */
byte reserved;    /* product_stock.reserved */
bit  held[2];     /* stock holds order o's line */
byte stockCopy[2];/* stock's order_status.version */
byte shipCopy[2]; /* shipping's order_status.version */

byte faults;      /* faults spent, at most MAXF */

/* ---------------------------------------------------------------- broker */

/* Exchange app.events routes a copy of row r to every queue bound to its
 * event; the first copy of an order's event must come after the first copy
 * of each of its earlier versions (ADR 0007: each order's events first reach
 * a queue in order). */
inline route(r) {
	if
	:: !sent[r] ->
		assert(r >= 6 || r % 3 == 0 || sent[r - 1]);
		sent[r] = 1
	:: else
	fi;
	if :: BOUND(STOCK, kind[r]) -> queued[STOCK * 8 + r]++ :: else fi;
	if :: BOUND(SHIP, kind[r])  -> queued[SHIP * 8 + r]++  :: else fi;
	if :: BOUND(ORDER, kind[r]) -> queued[ORDER * 8 + r]++ :: else fi
}

/* ------------------------------------------------------------ the client */

/* services/order/internal/store/store.go:update: one transaction locks the
 * order, moves it (order.go:Place, Cancel, Confirm, Reject) and writes its
 * event to the outbox (store.go:writeEvents); rule 1. */
inline move(o, to, ev) {
	status[o] = to;
	version[o]++;
	kind[ROW(o, version[o])] = ev
}

proctype Client() {
	/* both orders were placed before the run starts (init) */
	if
	:: d_step { (status[0] == PLACED || status[0] == CONFIRMED) -> move(0, CANCELLED, EV_CANCELLED) }
	:: skip                                   /* POST /orders/{id}/cancel, or not */
	fi
}

/* ------------------------------------------------------------ the relays */

#ifdef MUTANT_TWO_LEADERS
#define LEAD_FREE(ob) true
#define BATCH_FREE(ob) true
#else
#define LEAD_FREE(ob) ((ob == OB_ORDER && !leading[0] && !leading[1]) || (ob == OB_STOCK && !leading[2]))
#define BATCH_FREE(ob) (batchLock[ob] == 0)
#endif

/* Unpublished committed rows no transaction holds (what the batch would get). */
#define FREE_ROW(r) (kind[r] != EV_NONE && !published[r] && rowLock[r] == 0)
#define WORK(ob) (ob == OB_ORDER -> \
	(FREE_ROW(0) || FREE_ROW(1) || FREE_ROW(2) || FREE_ROW(3) || FREE_ROW(4) || FREE_ROW(5)) : \
	(FREE_ROW(6) || FREE_ROW(7)))

/* The batch transaction ends without a commit: its row locks and its batch
 * lock go (a crash, or the server ending an idle transaction). */
inline rollback(ob, me) {
	r = FIRST(ob);
	do
	:: r <= LAST(ob) -> if :: rowLock[r] == me + 1 -> rowLock[r] = 0 :: else fi; r++
	:: else -> break
	od;
	if :: batchLock[ob] == me + 1 -> batchLock[ob] = 0 :: else fi
}

#ifdef MUTANT_MARK_BEFORE_CONFIRM
#define MARKED(r) ((sel >> (r)) & 1)       /* every row it sent, confirmed or not */
#else
#define MARKED(r) ((cmask >> (r)) & 1)     /* the confirmed prefix only */
#endif

/* The batch's row after r that it selected (LAST(ob)+1: none left). */
inline nextSelected() {
	do
	:: r <= LAST(ob) && !((sel >> r) & 1) -> r++
	:: else -> break
	od
}

inline forget() { r = 0; sel = 0; cmask = 0; confirming = 0; dropped = 0 }

proctype Relay(byte ob; byte me) {
	byte r, sel, cmask;
	bit confirming, dropped;
	if :: leading[me] -> goto end_idle :: else fi;  /* the first leader (init) */
	/* leader.go:take: pg_try_advisory_lock on the partition's lead key, held
	 * by the relay's lock session (leader.go:join, guardLockSession) */
end_standby:
	if :: d_step { LEAD_FREE(ob) -> leading[me] = 1 } fi;
	/* worker.go:run waits for a NOTIFY or its poll, then batch.go:transaction */
end_idle:
	if
	:: d_step { !leading[me] -> skip }; goto end_standby    /* selectBatch: errLockLost */
	:: d_step { RELAY_FAULT -> faults++; leading[me] = 0 }; goto end_standby  /* killed */
	:: d_step { leading[me] && WORK(ob) && BATCH_FREE(ob) ->
		/* batch.go:selectBatch: the batch lock, the lead check, then
		 * SELECT ... WHERE published_at IS NULL ... FOR UPDATE SKIP LOCKED */
		batchLock[ob] = me + 1;
		confirming = 1;
		r = FIRST(ob);
		do
		:: r <= LAST(ob) ->
			if :: FREE_ROW(r) -> rowLock[r] = me + 1; sel = sel | (1 << r) :: else fi;
			r++
		:: else -> break
		od;
		r = FIRST(ob);
		nextSelected();
		skip }
	fi;
	do
	/* batch.go:send, row r of the batch, in publishing order; the broker's
	 * answer is what batch.go:confirm collects: the confirmed prefix */
	:: d_step { r <= LAST(ob) && !dropped ->          /* queued and confirmed */
		route(r); if :: confirming -> cmask = cmask | (1 << r) :: else fi; r++; nextSelected(); skip }
	:: d_step { r <= LAST(ob) && !dropped && BROKER_FAULT -> faults++;
		route(r); confirming = 0; r++; nextSelected(); skip }   /* queued, the confirm never comes */
	:: d_step { r <= LAST(ob) && !dropped && BROKER_FAULT -> faults++;
		route(r); route(r); if :: confirming -> cmask = cmask | (1 << r) :: else fi; r++; nextSelected(); skip }  /* queued twice */
	:: d_step { r <= LAST(ob) && !dropped && BROKER_FAULT -> faults++;
		dropped = 1; confirming = 0; r++; nextSelected(); skip }  /* lost with the channel, unconfirmed, */
	:: d_step { r <= LAST(ob) && dropped -> r++; nextSelected(); skip }   /* and every later message on it */
	/* batch.go:mark, then pg.WithTx commits: published_at on the confirmed prefix */
	:: d_step { r > LAST(ob) ->
		r = FIRST(ob);
		do
		:: r <= LAST(ob) ->
			if
			:: rowLock[r] == me + 1 -> rowLock[r] = 0; if :: MARKED(r) -> published[r] = 1 :: else fi
			:: else
			fi;
			r++
		:: else -> break
		od;
		if :: batchLock[ob] == me + 1 -> batchLock[ob] = 0 :: else fi;
		forget() }; goto end_idle
	/* killed in the batch: its sessions end, the lead lock and the transaction go */
	:: d_step { RELAY_FAULT -> faults++; leading[me] = 0; rollback(ob, me); forget() }; goto end_standby
	/* frozen in the batch: after RELAY_LOCK_TIMEOUT the server ends its lock
	 * session (idle_session_timeout); it then wakes with its transaction open
	 * and goes on, or the server ends the idle transaction first
	 * (idle_in_transaction_session_timeout: a batch sends nothing after its
	 * deadline, which comes before) */
	:: d_step { leading[me] && RELAY_FAULT -> faults++; leading[me] = 0 };
		if
		:: skip
		:: d_step { rollback(ob, me); forget() }; goto end_standby
		fi
	od
}

/* ---------------------------------------------------------- the operator */

/* outbox/replay.go:Replay (order replay-outbox --since --until): a published
 * row goes back in line; its consumers still hold its key (rule 5). */
inline replay(n) { d_step { published[n] && rowLock[n] == 0 -> published[n] = 0 } }

proctype Operator() {
	if
	:: skip
	:: replay(ROW(0, 1))   /* the first order's placed event */
	fi
}

/* --------------------------------------------------------- the consumers */

#ifdef MUTANT_NO_VERSION_GUARD
#define NEWER(copy, v) true
#else
#define NEWER(copy, v) ((copy) < (v))  /* WHERE order_status.version < EXCLUDED.version */
#endif

/* The handlers of consumer c for row r, inside the inbox's transaction. */
inline effect(c, r) {
	o = (r < 6 -> r / 3 : r - 6);
	v = r % 3 + 1;
	if
	:: c == STOCK && kind[r] == EV_PLACED ->
		/* stock events.go:placed, store.go:ApplyPlaced: a placed event that
		 * wins the version decides the whole order and answers in the same
		 * transaction (rule 6); a stale one holds and answers nothing */
		if
		:: NEWER(stockCopy[o], v) ->
			stockCopy[o] = v;
			if
			:: reserved < STOCK_ON_HAND -> reserved++; held[o] = 1; kind[ANSWER(o)] = EV_ANS_OK
			:: else -> kind[ANSWER(o)] = EV_ANS_NO
			fi;
			assert(reserved <= STOCK_ON_HAND)   /* no oversell */
		:: else
		fi
	:: c == STOCK && kind[r] == EV_CANCELLED ->
		/* stock events.go:cancelled, store.go:ApplyCancelled: releases what it holds */
		if
		:: NEWER(stockCopy[o], v) ->
			stockCopy[o] = v;
			if :: held[o] -> held[o] = 0; reserved-- :: else fi
		:: else
		fi
	:: c == SHIP ->
		/* shipping store.go:Apply: the versioned copy only moves forward (rule 4) */
		if :: NEWER(shipCopy[o], v) -> shipCopy[o] = v :: else fi
	:: c == ORDER ->
		/* order answers.go:confirmed, rejected; order.go:Confirm, Reject: an
		 * answer moves only the placement it answers (rule 7) */
		if
		:: status[o] == PLACED && version[o] == 1 ->
			if
			:: kind[r] == EV_ANS_OK -> move(o, CONFIRMED, EV_CONFIRMED)
			:: else -> move(o, REJECTED, EV_REJECTED)
			fi
		:: else
		fi
	fi;
	applied[c * 8 + r]++;
	assert(applied[c * 8 + r] == 1)   /* no effect applied twice */
}

/* The inbox's transaction (inbox store.go:handle): INSERT INTO
 * processed_event ... ON CONFLICT DO NOTHING, the handlers if the key is
 * new, COMMIT. A crash before the COMMIT rolls it all back and the broker
 * redelivers the copy: the state is as if it had not been delivered yet. */
inline transaction() {
	if :: !key[c * 8 + r] -> key[c * 8 + r] = 1; effect(c, r) :: else fi
}

/*
 * amqp/consumer.go:work receives a delivery of row k: any ready copy, since
 * requeues and retries do not keep a queue's order; the broker keeps it until
 * it is acked, and amqp/consumer.go:process acks after the commit. Each
 * delivery is two branches: acked, or the consumer crashed after the COMMIT
 * and before the ack, and the broker redelivers the copy.
 */
#if defined(MUTANT_ACK_BEFORE_COMMIT)
/* Acked on receipt; a crash before the COMMIT loses the copy. */
#define DELIVER(k) \
	:: d_step { queued[c * 8 + k] > 0 -> queued[c * 8 + k]--; r = k; transaction(); r = 0; o = 0; v = 0 } \
	:: d_step { queued[c * 8 + k] > 0 && CONSUMER_FAULT -> queued[c * 8 + k]--; faults++ }
#elif defined(MUTANT_KEY_OUTSIDE_TX)
/* The key commits in a transaction of its own, the effect in the next; a
 * crash between them leaves the key without the effect. */
#define DELIVER(k) \
	:: d_step { queued[c * 8 + k] > 0 -> queued[c * 8 + k]--; r = k; transaction(); r = 0; o = 0; v = 0 } \
	:: d_step { queued[c * 8 + k] > 0 && CONSUMER_FAULT -> faults++; key[c * 8 + k] = 1 }
#else
#define DELIVER(k) \
	:: d_step { queued[c * 8 + k] > 0 -> queued[c * 8 + k]--; r = k; transaction(); r = 0; o = 0; v = 0 } \
	:: d_step { queued[c * 8 + k] > 0 && CONSUMER_FAULT -> faults++; r = k; transaction(); r = 0; o = 0; v = 0 }
#endif

proctype Consumer(byte c) {
	byte r, o, v;
end_wait:
	do
	DELIVER(0)
	DELIVER(1)
	DELIVER(2)
	DELIVER(3)
	DELIVER(4)
	DELIVER(5)
	DELIVER(6)
	DELIVER(7)
	od
}

/* ----------------------------------------------------------- the monitor */

/* At the end of every run (no process can move: the faults are spent and
 * everything settled), the journey is complete. */
active proctype Monitor() {
	byte r, c, o;
	timeout;
	d_step {
		r = 0;
		do
		:: r < 8 ->
			if
			:: kind[r] != EV_NONE ->
				assert(published[r]);               /* every committed row is published */
				c = 0;
				do
				:: c < 3 ->                          /* and applied once by each consumer bound to it */
					assert(!BOUND(c, kind[r]) || (key[c * 8 + r] && applied[c * 8 + r] == 1));
					c++
				:: else -> break
				od
			:: else
			fi;
			r++
		:: else -> break
		od;
		o = 0;
		do
		:: o < 2 ->
			/* a placed order ends confirmed or rejected (or cancelled by the client) */
			assert(status[o] == CONFIRMED || status[o] == REJECTED || status[o] == CANCELLED);
			assert(held[o] == (status[o] == CONFIRMED));  /* stock holds exactly the confirmed */
			assert(shipCopy[o] == version[o]);             /* the copies end at the last version */
			o++
		:: else -> break
		od;
		assert(reserved == held[0] + held[1])
	}
}

init {
	atomic {
		move(0, PLACED, EV_PLACED);  /* POST /orders/{id}/place, twice */
		move(1, PLACED, EV_PLACED);
		leading[0] = 1;              /* relay 0 leads the order outbox, relay 1 stands by */
		leading[2] = 1;              /* the stock relay leads stock's outbox */
		run Client();
		run Relay(OB_ORDER, 0);
		run Relay(OB_ORDER, 1);
		run Relay(OB_STOCK, 2);
		run Consumer(STOCK);
		run Consumer(SHIP);
		run Consumer(ORDER);
		run Operator()
	}
}
