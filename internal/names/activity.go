package names

import "time"

// Activity is when traffic for an actor was last seen: what the router
// reports (Control.RecordActivity) and the record store keeps as the
// actor's last activity. The proto form is atev1.ActorActivity; convert
// with atev1.NewActorActivity and (*atev1.ActorActivity).Activity.
type Activity struct {
	Actor ActorKey
	Last  time.Time
}
