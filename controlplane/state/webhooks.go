package state

import (
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Webhook is a workspace's demo-launch webhook: where its events go and
// the key they are signed with, sealed (the Raft log and snapshots never
// hold it in the clear).
type Webhook struct {
	WorkspaceID  string    `json:"workspaceId"`
	URL          string    `json:"url"`
	SendEvents   bool      `json:"sendEvents"`
	SealedSecret []byte    `json:"sealedSecret"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

// Delivery statuses. A queued delivery has not been attempted yet.
const (
	DeliveryQueued    = "queued"
	DeliveryRetrying  = "retrying"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// Delivery is one event on its way to a workspace's webhook: the body is
// fixed when the event happens, so every attempt sends the same bytes
// under the same EventID (the idempotency-key) and ID (the
// x-service-delivery). Pending deliveries live in the replicated state,
// so a new leader carries on where the old one stopped.
type Delivery struct {
	ID          string `json:"id"`
	EventID     string `json:"eventId"`
	WorkspaceID string `json:"workspaceId"`
	Event       string `json:"event"`
	Body        []byte `json:"body"`
	// Attempt counts the attempts made; Done is set once the delivery is
	// delivered or failed for good.
	Attempt    int        `json:"attempt"`
	Status     string     `json:"status"`
	Done       bool       `json:"done"`
	NextAt     time.Time  `json:"nextAt"`
	HTTPStatus int        `json:"httpStatus,omitempty"`
	Error      string     `json:"error,omitempty"`
	At         *time.Time `json:"at,omitempty"`
	CreatedAt  time.Time  `json:"createdAt"`
}

// Attempt is the outcome of one delivery attempt.
type Attempt struct {
	ID         string    `json:"id"`
	Attempt    int       `json:"attempt"`
	Status     string    `json:"status"`
	HTTPStatus int       `json:"httpStatus,omitempty"`
	Error      string    `json:"error,omitempty"`
	At         time.Time `json:"at"`
	NextAt     time.Time `json:"nextAt"`
}

// keptDeliveries is how many finished deliveries a workspace keeps.
const keptDeliveries = 50

// MaxPendingDeliveries bounds the deliveries a workspace has on their way
// (queued or retrying): an event past it fails the oldest pending one
// (its endpoint has been missing them longest), so a flood of demos to a
// dead endpoint cannot grow the state.
const MaxPendingDeliveries = 1000

// droppedDelivery is the error a delivery failed for the bound gets.
var droppedDelivery = fmt.Sprintf("dropped: more than %d deliveries were pending for this webhook", MaxPendingDeliveries)

// Webhook returns a workspace's webhook, or nil.
func (s *Store) Webhook(workspaceID string) (*Webhook, error) {
	return first[Webhook](s.read(), tableWebhooks, "id", workspaceID)
}

// PendingDeliveries lists the deliveries not yet delivered or failed.
func (s *Store) PendingDeliveries() ([]*Delivery, error) {
	return all[Delivery](s.read(), tableDeliveries, "done", false)
}

// Delivery returns a delivery by id, or nil.
func (s *Store) Delivery(id string) (*Delivery, error) {
	return first[Delivery](s.read(), tableDeliveries, "id", id)
}

// LastDelivery is a workspace's most recently attempted delivery, or nil.
func (s *Store) LastDelivery(workspaceID string) (*Delivery, error) {
	ds, err := all[Delivery](s.read(), tableDeliveries, "workspace", workspaceID)
	var last *Delivery
	for _, d := range ds {
		if d.At != nil && (last == nil || d.At.After(*last.At) || d.At.Equal(*last.At) && d.ID > last.ID) {
			last = d
		}
	}
	return last, err
}

// PutWebhook sets a workspace's webhook's URL and sendEvents; its secret
// is w's only when it has none yet, so two writers that raced keep one
// secret. With rotate, only the secret (and UpdatedAt) change, on a
// webhook that exists.
func (t *Tx) PutWebhook(w Webhook, rotate bool) error {
	return t.run(func(tx *memdb.Txn) error {
		if ws, err := first[Workspace](tx, tableWorkspaces, "id", w.WorkspaceID); err != nil {
			return err
		} else if ws == nil {
			return fmt.Errorf("%w: workspace %s", ErrNotFound, w.WorkspaceID)
		}
		old, err := first[Webhook](tx, tableWebhooks, "id", w.WorkspaceID)
		if err != nil {
			return err
		}
		switch {
		case rotate && old == nil:
			return fmt.Errorf("%w: no webhook in workspace %s", ErrNotFound, w.WorkspaceID)
		case rotate:
			next := *old
			next.SealedSecret, next.UpdatedAt = w.SealedSecret, w.UpdatedAt
			w = next
		case old != nil:
			w.SealedSecret, w.CreatedAt = old.SealedSecret, old.CreatedAt
		}
		if w.URL == "" || len(w.SealedSecret) == 0 {
			return fmt.Errorf("%w: a webhook has a URL and a secret", ErrInvalid)
		}
		return insert(tx, tableWebhooks, &w)
	})
}

// DeleteWebhook removes a workspace's webhook with its deliveries, sent
// and pending; none is fine.
func (t *Tx) DeleteWebhook(workspaceID string) error {
	return t.run(func(tx *memdb.Txn) error {
		if _, err := tx.DeleteAll(tableWebhooks, "id", workspaceID); err != nil {
			return err
		}
		_, err := tx.DeleteAll(tableDeliveries, "workspace", workspaceID)
		return err
	})
}

// enqueue adds a delivery when its workspace's webhook sends events; nil,
// or a delivery already there, adds nothing.
func enqueue(tx *memdb.Txn, d *Delivery) error {
	if d == nil {
		return nil
	}
	w, err := first[Webhook](tx, tableWebhooks, "id", d.WorkspaceID)
	if err != nil || w == nil || !w.SendEvents {
		return err
	}
	if dup, err := first[Delivery](tx, tableDeliveries, "id", d.ID); err != nil || dup != nil {
		return err
	}
	next := *d
	next.Attempt, next.Status, next.Done = 0, DeliveryQueued, false
	if err := insert(tx, tableDeliveries, &next); err != nil {
		return err
	}
	return boundPending(tx, d.WorkspaceID)
}

// boundPending fails a workspace's oldest pending deliveries beyond
// MaxPendingDeliveries, then keeps its latest finished ones.
func boundPending(tx *memdb.Txn, workspaceID string) error {
	ds, err := all[Delivery](tx, tableDeliveries, "workspace", workspaceID)
	if err != nil {
		return err
	}
	var pending []*Delivery
	for _, d := range ds {
		if !d.Done {
			pending = append(pending, d)
		}
	}
	if len(pending) <= MaxPendingDeliveries {
		return nil
	}
	sort.Slice(pending, func(i, j int) bool {
		if !pending[i].CreatedAt.Equal(pending[j].CreatedAt) {
			return pending[i].CreatedAt.Before(pending[j].CreatedAt)
		}
		return pending[i].ID < pending[j].ID
	})
	for _, d := range pending[:len(pending)-MaxPendingDeliveries] {
		c := *d
		c.Status, c.Done, c.Error = DeliveryFailed, true, droppedDelivery
		if err := insert(tx, tableDeliveries, &c); err != nil {
			return err
		}
	}
	return pruneDeliveries(tx, workspaceID)
}

// AddDelivery records a delivery made outside the queue (a test event,
// sent at once): it is kept as the workspace's latest result.
func (t *Tx) AddDelivery(d Delivery) error {
	return t.run(func(tx *memdb.Txn) error {
		w, err := first[Webhook](tx, tableWebhooks, "id", d.WorkspaceID)
		if err != nil {
			return err
		}
		if w == nil {
			return fmt.Errorf("%w: no webhook in workspace %s", ErrNotFound, d.WorkspaceID)
		}
		if dup, err := first[Delivery](tx, tableDeliveries, "id", d.ID); err != nil || dup != nil {
			return err
		}
		d.Done = true
		if d.At != nil {
			at, err := attemptOrder(tx, d.WorkspaceID, *d.At)
			if err != nil {
				return err
			}
			d.At = &at
		}
		if err := insert(tx, tableDeliveries, &d); err != nil {
			return err
		}
		return pruneDeliveries(tx, d.WorkspaceID)
	})
}

// RecordAttempt records the outcome of a delivery's next attempt: it is
// refused with ErrStale unless the delivery is pending and a.Attempt is
// its next attempt, so an attempt is counted once whoever records it.
func (t *Tx) RecordAttempt(a Attempt) error {
	return t.run(func(tx *memdb.Txn) error {
		d, err := first[Delivery](tx, tableDeliveries, "id", a.ID)
		if err != nil {
			return err
		}
		if d == nil {
			return fmt.Errorf("%w: delivery %s", ErrNotFound, a.ID)
		}
		if d.Done || a.Attempt != d.Attempt+1 {
			return fmt.Errorf("%w: delivery %s is at attempt %d", ErrStale, a.ID, d.Attempt)
		}
		switch a.Status {
		case DeliveryRetrying, DeliveryDelivered, DeliveryFailed:
		default:
			return fmt.Errorf("%w: delivery status %q", ErrInvalid, a.Status)
		}
		next := *d
		at, err := attemptOrder(tx, d.WorkspaceID, a.At)
		if err != nil {
			return err
		}
		next.Attempt, next.Status, next.HTTPStatus, next.Error, next.At, next.NextAt = a.Attempt, a.Status, a.HTTPStatus, a.Error, &at, a.NextAt
		next.Done = a.Status != DeliveryRetrying
		if err := insert(tx, tableDeliveries, &next); err != nil {
			return err
		}
		if next.Done {
			return pruneDeliveries(tx, d.WorkspaceID)
		}
		return nil
	})
}

// attemptOrder is the time to record an attempt at: at, or just after
// the workspace's latest recorded attempt when at is not after it (two
// attempts in one millisecond), so the one recorded last is the latest
// and LastDelivery never picks between equal times. It reads only the
// state, so every server records the same time.
func attemptOrder(tx *memdb.Txn, workspaceID string, at time.Time) (time.Time, error) {
	ds, err := all[Delivery](tx, tableDeliveries, "workspace", workspaceID)
	if err != nil {
		return at, err
	}
	for _, d := range ds {
		if d.At != nil && !at.After(*d.At) {
			at = d.At.Add(time.Millisecond)
		}
	}
	return at, nil
}

// pruneDeliveries keeps a workspace's latest finished deliveries.
func pruneDeliveries(tx *memdb.Txn, workspaceID string) error {
	ds, err := all[Delivery](tx, tableDeliveries, "workspace", workspaceID)
	if err != nil {
		return err
	}
	var done []*Delivery
	for _, d := range ds {
		if d.Done {
			done = append(done, d)
		}
	}
	if len(done) <= keptDeliveries {
		return nil
	}
	sort.Slice(done, func(i, j int) bool {
		if !done[i].CreatedAt.Equal(done[j].CreatedAt) {
			return done[i].CreatedAt.Before(done[j].CreatedAt)
		}
		return done[i].ID < done[j].ID
	})
	for _, d := range done[:len(done)-keptDeliveries] {
		if err := tx.Delete(tableDeliveries, d); err != nil {
			return err
		}
	}
	return nil
}
