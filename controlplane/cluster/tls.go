package cluster

import (
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tlsStream is Raft's stream layer over mutual TLS: servers reach each
// other only with certificates the cluster CA issued to servers (the
// configs check that), so nothing else can join, read or forge the log.
type tlsStream struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
}

var _ raft.StreamLayer = (*tlsStream)(nil)

func newTLSStream(bind string, advertise net.Addr, server, client *tls.Config) (*tlsStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if tcp, ok := advertise.(*net.TCPAddr); !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		ln.Close()
		return nil, errors.New("raft: the advertised address must be a reachable IP address")
	}
	return &tlsStream{Listener: tls.NewListener(ln, server), advertise: advertise, client: client}, nil
}

// Dial implements raft.StreamLayer.
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.client}
	return d.Dial("tcp", string(address))
}

// Addr implements net.Listener with the advertised address.
func (s *tlsStream) Addr() net.Addr { return s.advertise }
