// Package routes serves the edge's route table: every site's host and
// backend, sent whole when an edge connects and as changes afterwards,
// from the control plane's replicated state.
package routes

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/state"
	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
	"google.golang.org/protobuf/proto"
)

// Service implements RouteService over the state store.
type Service struct {
	store *state.Store
	log   *slog.Logger
	// CaughtUp, when set, says whether this server's state is current; a
	// stream waits for it (a server just restarted would otherwise send
	// edges a table missing what it has not applied yet).
	CaughtUp func() bool
}

var _ edgev1connect.RouteServiceHandler = (*Service)(nil)

// New returns the route service.
func New(store *state.Store, log *slog.Logger) *Service {
	return &Service{store: store, log: log.With("component", "routes")}
}

// Table computes the routes of every site that has a host to serve, and
// of every active custom domain (the same backend as its site's sandbox
// host, marked custom: the edge redirects it to https and may get it a
// certificate), whose site's sandbox host then redirects to it.
func Table(sites []*state.Site, nodes map[string]*state.Node, domains []*state.Domain) map[string]*edgev1.Route {
	out := map[string]*edgev1.Route{}
	bySite := map[string]*edgev1.Route{}
	for _, s := range sites {
		if s.Pool != "" {
			continue // unclaimed: nobody's site, not served
		}
		u, err := url.Parse(s.URL)
		if err != nil || u.Hostname() == "" {
			continue
		}
		r := &edgev1.Route{Host: strings.ToLower(u.Hostname()), SiteId: s.ID}
		switch s.Status {
		case state.SiteReady:
			n := nodes[s.NodeID]
			if n == nil || s.Port == 0 {
				continue
			}
			r.Status = edgev1.RouteStatus_ROUTE_STATUS_READY
			host := n.BackendHost
			if s.Address != "" {
				// The site's own address in its namespace on the node.
				host = s.Address
			}
			r.Backend = net.JoinHostPort(host, strconv.Itoa(s.Port))
			r.Ingress, r.NodeId = n.IngressAddr, n.ID
		case state.SiteCreating:
			r.Status = edgev1.RouteStatus_ROUTE_STATUS_CREATING
		case state.SiteUnavailable:
			r.Status = edgev1.RouteStatus_ROUTE_STATUS_UNAVAILABLE
		default:
			continue // failed and deleting sites are not served
		}
		out[r.Host] = r
		bySite[s.ID] = r
	}
	for _, d := range domains {
		site := bySite[d.SiteID]
		if site == nil || !d.Serving() {
			continue
		}
		r := proto.CloneOf(site)
		r.Host, r.Custom = d.Hostname, true
		out[r.Host] = r
		// WordPress lives at the domain now: its sandbox host leads there.
		site.Redirect = "https://" + d.Hostname
	}
	return out
}

func (s *Service) table() (map[string]*edgev1.Route, <-chan error, func(), error) {
	sites, ws, err := s.store.AllSites()
	if err != nil {
		return nil, nil, nil, err
	}
	nodes, err := s.store.Nodes()
	if err != nil {
		return nil, nil, nil, err
	}
	domains, err := s.store.Domains()
	if err != nil {
		return nil, nil, nil, err
	}
	byID := map[string]*state.Node{}
	for _, n := range nodes {
		byID[n.ID] = n
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- ws.WatchCtx(ctx) }()
	return Table(sites, byID, domains), ch, cancel, nil
}

// WatchRoutes streams the table: a snapshot first, then the difference
// after every change to sites or nodes.
func (s *Service) WatchRoutes(ctx context.Context, req *connect.Request[edgev1.WatchRoutesRequest], stream *connect.ServerStream[edgev1.RouteEvent]) error {
	if s.CaughtUp != nil {
		deadline := time.Now().Add(5 * time.Second)
		for !s.CaughtUp() {
			if time.Now().After(deadline) {
				return connect.NewError(connect.CodeUnavailable, errors.New("this server is catching up with the cluster; try another"))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	var sent map[string]*edgev1.Route
	for {
		cur, changed, stop, err := s.table()
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		ev := &edgev1.RouteEvent{}
		if sent == nil {
			ev.Snapshot = true
			for _, r := range cur {
				ev.Upserts = append(ev.Upserts, r)
			}
		} else {
			for h, r := range cur {
				if old, ok := sent[h]; !ok || !proto.Equal(old, r) {
					ev.Upserts = append(ev.Upserts, r)
				}
			}
			for h := range sent {
				if _, ok := cur[h]; !ok {
					ev.RemovedHosts = append(ev.RemovedHosts, h)
				}
			}
		}
		if ev.Snapshot || len(ev.Upserts) > 0 || len(ev.RemovedHosts) > 0 {
			if err := stream.Send(ev); err != nil {
				stop()
				return err
			}
		}
		sent = cur
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-changed:
			stop()
		}
	}
}
