package store

import (
	"context"
	"time"
)

// NodeDrain records that a node was drained (DrainNode): every API
// server replica reads it, so none places actors on the node, whichever
// replica was asked and whether or not it can reach the node, and the
// drain outlives the node's and the replicas' restarts until the node is
// removed (RemoveNode), which deletes it.
type NodeDrain struct {
	// Node is the node's name, unique in the store.
	Node string `json:"node"`
	// Reason is DrainNode's, for ListNodes' message.
	Reason     string    `json:"reason,omitempty"`
	CreateTime time.Time `json:"createTime"`
}

// NodeDrains is the node drain part of the Store contract.
type NodeDrains interface {
	// PutNodeDrain stores d, replacing the node's earlier drain (its
	// reason and time stay the first's: draining again changes nothing).
	PutNodeDrain(ctx context.Context, d *NodeDrain) error
	// ListNodeDrains returns every drain in node name order.
	ListNodeDrains(ctx context.Context) ([]*NodeDrain, error)
	// DeleteNodeDrain deletes the node's drain; deleting none succeeds.
	DeleteNodeDrain(ctx context.Context, node string) error
}
