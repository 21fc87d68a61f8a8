package api

import (
	"net/http/httptest"
	"testing"
)

func TestLogLines(t *testing.T) {
	for q, want := range map[string]int{"": 500, "?lines=abc": 500, "?lines=10": 10, "?lines=0": 1, "?lines=-5": 1,
		"?lines=2000": 2000, "?lines=99999": 2000, "?lines=1.5": 500, "?lines=": 500} {
		if got := logLines(httptest.NewRequest("GET", "/x"+q, nil)); got != want {
			t.Errorf("%q: %d, want %d", q, got, want)
		}
	}
}
