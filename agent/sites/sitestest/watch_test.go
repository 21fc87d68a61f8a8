package sitestest

import (
	"strings"
	"testing"
)

func TestStacks(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	go func() { waitHere(block) }()
	for range 100 {
		for _, l := range Stacks() {
			if strings.Contains(l, "sitestest.waitHere < agent/sites/sitestest.TestStacks.func1") &&
				strings.Contains(l, "[chan receive") {
				t.Log(l)
				return
			}
		}
	}
	t.Fatalf("no line for the waiting goroutine: %q", Stacks())
}

func waitHere(c chan struct{}) { <-c }
