// Package rpclimit holds the byte caps on every Connect message between
// the control plane, agents and edges, so that no peer, and no site's
// content relayed by one, makes another buffer an unbounded message. Each
// side caps what it reads and what it sends: a message too big to send
// fails at the sender with a clear error instead of at the reader.
package rpclimit

import "connectrpc.com/connect"

const (
	// AgentRequest bounds a call to an agent: a plugin ZIP (64 MiB at
	// most) or a file-manager write (32 MiB) with its envelope.
	AgentRequest = 80 << 20
	// AgentResponse bounds an agent's answer: a 32 MiB file read as
	// base64 JSON (43 MiB), or a mail list of 128 messages of 256 KiB.
	AgentResponse = 64 << 20
	// Control bounds the small messages of the registry and the route
	// watch requests: heartbeats, registrations, an edge's hello.
	Control = 4 << 20
	// Routes bounds one message of the route stream an edge reads: the
	// whole table at about 200 bytes a route, room for 300,000 sites.
	Routes = 64 << 20
)

// AgentServer is the agent's handler options.
func AgentServer() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithReadMaxBytes(AgentRequest), connect.WithSendMaxBytes(AgentResponse)}
}

// AgentClient is the control plane's options for calling agents.
func AgentClient() []connect.ClientOption {
	return []connect.ClientOption{connect.WithSendMaxBytes(AgentRequest), connect.WithReadMaxBytes(AgentResponse)}
}

// RegistryServer is the control plane's options for the registry agents call.
func RegistryServer() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithReadMaxBytes(Control), connect.WithSendMaxBytes(Control)}
}

// RegistryClient is an agent's options for calling the registry.
func RegistryClient() []connect.ClientOption {
	return []connect.ClientOption{connect.WithSendMaxBytes(Control), connect.WithReadMaxBytes(Control)}
}

// CertServer is the control plane's options for the edges' certificate
// storage: values are certificates, keys and ACME records, a few KiB.
func CertServer() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithReadMaxBytes(Control), connect.WithSendMaxBytes(Control)}
}

// CertClient is an edge's options for its certificate storage.
func CertClient() []connect.ClientOption {
	return []connect.ClientOption{connect.WithSendMaxBytes(Control), connect.WithReadMaxBytes(Control)}
}

// RoutesServer is the control plane's options for the route stream.
func RoutesServer() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithReadMaxBytes(Control), connect.WithSendMaxBytes(Routes)}
}

// RoutesClient is an edge's options for watching routes.
func RoutesClient() []connect.ClientOption {
	return []connect.ClientOption{connect.WithSendMaxBytes(Control), connect.WithReadMaxBytes(Routes)}
}
