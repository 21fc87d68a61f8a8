package toolbox_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/agent/agenttest"
)

func TestMain(m *testing.M) { agenttest.Main(m) }
