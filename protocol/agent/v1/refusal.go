package agentv1

// RefusalKey is the Connect error metadata key under which an agent says
// why it answered CodeResourceExhausted, so the control plane can tell
// the customer which limit a request hit.
const RefusalKey = "Sandboxd-Refusal"

// Refusals an agent names under RefusalKey.
const (
	// RefusalDiskFull: the site's disk (its files and its database) is
	// full, the plan's limit.
	RefusalDiskFull = "disk_full"
	// RefusalTooLarge: the request is over a fixed cap of the node's (an
	// import's dump that decompresses past its bound), whatever the plan.
	RefusalTooLarge = "too_large"
	// RefusalSQL: under CodeInvalidArgument, the database refused a
	// statement a tenant sent (RunSQL); the message is its reason.
	RefusalSQL = "sql_error"
	// RefusalCheckpointsFull: a site's checkpoints already hold, of
	// their own, as much as its disk is large.
	RefusalCheckpointsFull = "checkpoints_full"
	// RefusalNodeUnable: under CodeUnavailable, what the node cannot do
	// now (its disk nearly full) or at all (no way to clone disks); the
	// message says which.
	RefusalNodeUnable = "node_unable"
)
