package plans

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/internal/apierr"
)

func TestCheck(t *testing.T) {
	c := Default()
	c.Paid.Templates = 0 // unlimited
	cases := []struct {
		plan, resource string
		used           int
		limit          int // 0: allowed
	}{
		{"free", Sites, 2, 0},
		{"free", Sites, 3, 3},
		{"free", Templates, 3, 3},
		{"paid", Sites, 3, 0},
		{"paid", Templates, 100000, 0},
		{"free", Workspaces, 2, 2},
	}
	for _, tc := range cases {
		q, err := c.Quota(tc.plan, tc.resource)
		if err != nil {
			t.Fatal(err)
		}
		if q.Exceeded(tc.used) {
			err = Error(q)
		}
		if tc.limit == 0 {
			if err != nil {
				t.Fatalf("%+v: %v", tc, err)
			}
			continue
		}
		var ae *apierr.Error
		if !errors.As(err, &ae) || ae.Status != 402 || ae.Code != "plan_limit_reached" ||
			ae.Details["plan"] != tc.plan || ae.Details["limit"] != tc.limit || ae.Details["resource"] != tc.resource {
			t.Fatalf("%+v: %#v", tc, err)
		}
	}
	if _, err := c.Quota("free", "nonsense"); err == nil {
		t.Fatal("unknown resource accepted")
	}
	bad := Default()
	bad.Free.Sites = -1
	if bad.Validate() == nil {
		t.Fatal("negative limit accepted")
	}
}
