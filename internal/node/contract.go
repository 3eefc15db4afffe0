package node

import "substrate.dev/ate/internal/nodeapi"

// *Node is the node contract's Node in process: nodeagent.Server serves
// it to the API server over the node protocol.
var _ nodeapi.Node = (*Node)(nil)

// The node contract's words under the names the node's own code uses;
// they are defined, with their meaning, in internal/nodeapi.
type (
	StartRequest      = nodeapi.StartRequest
	CheckpointOptions = nodeapi.CheckpointOptions
	ExecRequest       = nodeapi.ExecRequest
	Activity          = nodeapi.Activity
)

// MaxCopyBytes is nodeapi.MaxCopyBytes.
const MaxCopyBytes = nodeapi.MaxCopyBytes

// The node's errors (nodeapi).
var (
	ErrStale           = nodeapi.ErrStale
	ErrUnknownWorker   = nodeapi.ErrUnknownWorker
	ErrStartFailed     = nodeapi.ErrStartFailed
	ErrNotServing      = nodeapi.ErrNotServing
	ErrBadPath         = nodeapi.ErrBadPath
	ErrTooLarge        = nodeapi.ErrTooLarge
	ErrNoFile          = nodeapi.ErrNoFile
	ErrExecEnded       = nodeapi.ErrExecEnded
	ErrExecUnsupported = nodeapi.ErrExecUnsupported
	ErrFenced          = nodeapi.ErrFenced
)
