package state

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestOrderCertBudgets: each budget refuses the order past its count in
// its window and says when it refills; renewals are counted by the
// cluster's budget but never refused; a refusal counts nothing; orders
// older than every window are forgotten.
func TestOrderCertBudgets(t *testing.T) {
	budget := CertBudget{Cluster: 5, Workspace: 3, Window: 3 * time.Hour, RegisteredDomain: 4, RegisteredDomainWindow: 7 * 24 * time.Hour,
		Cooldown: 24 * time.Hour}
	order := func(name, ws string, at time.Duration) CertOrder {
		_, reg, _ := strings.Cut(name, ".")
		return CertOrder{Name: name, WorkspaceID: ws, RegisteredDomain: reg, At: t0.Add(at)}
	}
	renewal := func(o CertOrder) CertOrder { o.Renewal = true; return o }
	ownedBy := func(owner string, o CertOrder) CertOrder { o.OwnerID = owner; return o }
	type step struct {
		o    CertOrder
		want string // "" allowed, else the budget that refuses
		// until is when the refusal refills, from t0.
		until time.Duration
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a workspace's budget", []step{
			{o: order("a.one.test", "ws1", 0)},
			{o: order("b.two.test", "ws1", time.Minute)},
			{o: order("c.three.test", "ws1", 2*time.Minute)},
			{o: order("d.four.test", "ws1", 3*time.Minute), want: BudgetWorkspace, until: 3 * time.Hour},
			{o: order("d.four.test", "ws2", 4*time.Minute)}, // another workspace
			{o: order("d.four.test", "ws1", 3*time.Hour+time.Second), want: BudgetCooldown, until: 24*time.Hour + 4*time.Minute},
			{o: order("e.four.test", "ws1", 3*time.Hour+time.Second)}, // the first order left the window
		}},
		{"the cluster's budget, renewals included", []step{
			{o: renewal(order("a.one.test", "ws1", 0))},
			{o: renewal(order("b.one.test", "ws2", time.Minute))},
			{o: order("c.two.test", "ws3", 2*time.Minute)},
			{o: order("d.three.test", "ws4", 3*time.Minute)},
			{o: order("e.four.test", "ws5", 4*time.Minute)},
			{o: order("f.five.test", "ws6", 5*time.Minute), want: BudgetCluster, until: 3 * time.Hour},
			{o: renewal(order("g.six.test", "ws6", 6*time.Minute))}, // never refused
			{o: order("f.five.test", "ws6", 3*time.Hour+30*time.Second), want: BudgetCluster, until: 3*time.Hour + time.Minute},
			{o: order("f.five.test", "ws6", 3*time.Hour+time.Minute)}, // the second renewal left the window
		}},
		{"one account's workspaces share its budget", []step{
			{o: ownedBy("usr1", order("a.one.test", "ws1", 0))},
			{o: ownedBy("usr1", order("b.two.test", "ws2", time.Minute))},
			{o: ownedBy("usr1", order("c.three.test", "ws3", 2*time.Minute))},
			{o: ownedBy("usr1", order("d.four.test", "ws4", 3*time.Minute)), want: BudgetWorkspace, until: 3 * time.Hour},
			{o: ownedBy("usr2", order("d.four.test", "ws5", 4*time.Minute))}, // another account
		}},
		{"renewals stop at the ceiling, a fifth above the cluster's budget", []step{
			{o: renewal(order("a.one.test", "ws1", 0))},
			{o: renewal(order("b.one.test", "ws2", time.Minute))},
			{o: renewal(order("c.one.test", "ws3", 2*time.Minute))},
			{o: renewal(order("d.one.test", "ws4", 3*time.Minute))},
			{o: renewal(order("e.one.test", "ws5", 4*time.Minute))},
			{o: order("f.two.test", "ws6", 5*time.Minute), want: BudgetCluster, until: 3 * time.Hour},
			{o: renewal(order("g.one.test", "ws6", 6*time.Minute))}, // the sixth: 5 + 5/5
			{o: renewal(order("h.one.test", "ws6", 7*time.Minute)), want: BudgetCluster, until: 3 * time.Hour},
		}},
		{"a registered domain's week", []step{
			{o: order("a.shop.test", "ws1", 0)},
			{o: order("b.shop.test", "ws2", 4*time.Hour)},
			{o: order("c.shop.test", "ws3", 8*time.Hour)},
			{o: renewal(order("d.shop.test", "ws4", 9*time.Hour))}, // renewals are not counted here
			{o: order("e.shop.test", "ws4", 12*time.Hour)},
			{o: order("f.shop.test", "ws5", 16*time.Hour), want: BudgetRegisteredDomain, until: 7 * 24 * time.Hour},
			{o: order("f.other.test", "ws5", 16*time.Hour)},
			{o: order("f.shop.test", "ws5", 7*24*time.Hour+time.Second)},
		}},
		{"a name's cool-down", []step{
			{o: order("a.one.test", "ws1", 0)},
			{o: order("a.one.test", "ws2", time.Hour), want: BudgetCooldown, until: 24 * time.Hour},
			{o: renewal(order("a.one.test", "ws1", 2*time.Hour))}, // a renewal replaces what storage holds
			{o: order("a.one.test", "ws1", 25*time.Hour), want: BudgetCooldown, until: 26 * time.Hour},
			{o: order("a.one.test", "ws1", 26*time.Hour)},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewStore()
			counted := 0
			for i, st := range c.steps {
				st.o.ID = fmt.Sprintf("%019d-%d", st.o.At.UnixNano(), i)
				peek, err := s.DecideCertOrder(st.o, budget)
				must(t, err)
				var block *CertBlock
				must(t, s.Update(func(tx *Tx) error { block, err = tx.OrderCert(st.o, budget); return err }))
				if !sameBlock(peek, block) {
					t.Errorf("step %d: DecideCertOrder said %+v, OrderCert %+v", i, peek, block)
				}
				switch {
				case st.want == "" && block != nil:
					t.Fatalf("step %d (%s at %s): refused: %+v", i, st.o.Name, st.o.At.Sub(t0), block)
				case st.want != "" && (block == nil || block.Budget != st.want || !block.Until.Equal(t0.Add(st.until))):
					t.Fatalf("step %d (%s at %s): %+v, want %s until t0+%s", i, st.o.Name, st.o.At.Sub(t0), block, st.want, st.until)
				case block == nil:
					counted++
				}
				if block != nil && !strings.Contains(block.Describe(), block.Until.UTC().Format(time.RFC3339)) {
					t.Errorf("step %d: %q does not say when it refills", i, block.Describe())
				}
			}
			orders, err := s.CertOrders()
			must(t, err)
			if len(orders) > counted {
				t.Errorf("%d orders kept, %d allowed", len(orders), counted)
			}
		})
	}

	t.Run("old orders are forgotten", func(t *testing.T) {
		s := NewStore()
		for i := range 10 {
			o := order(fmt.Sprintf("n%d.one.test", i), "ws1", time.Duration(i)*time.Hour)
			o.ID = fmt.Sprint(i)
			must(t, s.Update(func(tx *Tx) error { _, err := tx.OrderCert(o, CertBudget{Window: 3 * time.Hour}); return err }))
		}
		orders, err := s.CertOrders()
		must(t, err)
		if len(orders) != 3 { // at 7h, 8h and 9h: the ones within 3h of the last
			t.Fatalf("%d orders kept, want 3", len(orders))
		}
	})
}

// TestOrderCertMarksTheDomain: a refused order of an active custom domain
// is recorded on it (what the API's lastError says), and the next order
// that goes ahead clears it.
func TestOrderCertMarksTheDomain(t *testing.T) {
	s := seed(t)
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateSite(Site{ID: "site_1", WorkspaceID: "ws_b", UserID: "usr_b", Slug: "s1", Status: SiteReady, CreatedAt: t0}, Quota{})
	}))
	must(t, s.Update(func(tx *Tx) error {
		_, err := tx.ConnectDomain(Domain{SiteID: "site_1", WorkspaceID: "ws_b", Hostname: "shop.example.com", Status: DomainActive, CreatedAt: t0})
		return err
	}))
	budget := CertBudget{Cooldown: time.Hour}
	try := func(at time.Duration) *CertBlock {
		o := CertOrder{ID: fmt.Sprint(at), Name: "shop.example.com", WorkspaceID: "ws_b", At: t0.Add(at)}
		var b *CertBlock
		must(t, s.Update(func(tx *Tx) error { var err error; b, err = tx.OrderCert(o, budget); return err }))
		return b
	}
	blocked := func() *CertBlock {
		d, err := s.DomainByHostname("shop.example.com")
		must(t, err)
		return d.CertBlocked
	}
	if try(0) != nil || blocked() != nil {
		t.Fatal("the first order was refused")
	}
	if b := try(time.Minute); b == nil || !sameBlock(blocked(), b) {
		t.Fatalf("the refusal %+v is not on the domain: %+v", b, blocked())
	}
	if try(2*time.Hour) != nil || blocked() != nil {
		t.Fatalf("the order after the cool-down left the domain blocked: %+v", blocked())
	}
}

// TestDomainClaimsLapse: a claim lapses ClaimTTL after it became pending
// (a check that finds the records wrong again does not restart it; a
// domain that falls back to pending after a failed move starts anew),
// and proven domains never lapse.
func TestDomainClaimsLapse(t *testing.T) {
	s := seed(t)
	for i, id := range []string{"site_p", "site_f", "site_a"} {
		must(t, s.Update(func(tx *Tx) error {
			return tx.CreateSite(Site{ID: id, WorkspaceID: "ws_b", UserID: "usr_b", Slug: id, Status: SiteReady, CreatedAt: t0}, Quota{})
		}))
		must(t, s.Update(func(tx *Tx) error {
			_, err := tx.ConnectDomain(Domain{SiteID: id, WorkspaceID: "ws_b", Hostname: fmt.Sprintf("d%d.example.com", i), CreatedAt: t0, UpdatedAt: t0})
			return err
		}))
	}
	put := func(id, host, status string, at time.Duration) {
		t.Helper()
		must(t, s.Update(func(tx *Tx) error {
			_, err := tx.PutDomain(Domain{SiteID: id, Hostname: host, Status: status, UpdatedAt: t0.Add(at)}, nil, nil)
			return err
		}))
	}
	put("site_p", "d0.example.com", DomainPendingDNS, 10*time.Hour) // a check: still pending since t0
	put("site_f", "d1.example.com", DomainFailed, time.Hour)
	put("site_f", "d1.example.com", DomainPendingDNS, 48*time.Hour) // pending again from t0+48h
	put("site_a", "d2.example.com", DomainActive, time.Hour)
	expire := func(at time.Duration) []string {
		var gone []*Domain
		must(t, s.Update(func(tx *Tx) error {
			var err error
			gone, err = tx.ExpireDomainClaims(t0.Add(at - ClaimTTL))
			return err
		}))
		var out []string
		for _, d := range gone {
			out = append(out, d.Hostname)
		}
		return out
	}
	for _, c := range []struct {
		at   time.Duration
		want string
	}{
		{ClaimTTL, ""},
		{ClaimTTL + time.Second, "d0.example.com"},
		{ClaimTTL + 48*time.Hour, ""},
		{ClaimTTL + 48*time.Hour + time.Second, "d1.example.com"},
		{100 * ClaimTTL, ""},
	} {
		if got := strings.Join(expire(c.at), ","); got != c.want {
			t.Errorf("at t0+%s: released %q, want %q", c.at, got, c.want)
		}
	}
	if d, _ := s.DomainByHostname("d2.example.com"); d == nil {
		t.Error("an active domain lapsed")
	}
}
