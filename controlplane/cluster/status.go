package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// LastContact is when this node last heard from a leader; zero on the
// leader itself and before any contact.
func (n *Node) LastContact() time.Time {
	if n.raft.State() == raft.Leader {
		return time.Time{}
	}
	return n.raft.LastContact()
}

// ConfiguredServer is one server of the Raft configuration.
type ConfiguredServer struct {
	ID      string
	Address string
	Voter   bool
}

// Configuration is the latest Raft configuration this node knows:
// the servers that vote (or will), whether or not they answer.
func (n *Node) Configuration() ([]ConfiguredServer, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", err)
	}
	var out []ConfiguredServer
	for _, s := range f.Configuration().Servers {
		out = append(out, ConfiguredServer{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}
