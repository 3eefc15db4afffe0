package atev1

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"substrate.dev/ate/internal/names"
)

// NewActorActivity is act in its wire form. It and Activity are the one
// conversion between names.Activity, which the router and the record
// store share, and the RecordActivity message.
func NewActorActivity(act names.Activity) *ActorActivity {
	return &ActorActivity{Atespace: act.Actor.Atespace, Name: act.Actor.Name, LastActivity: timestamppb.New(act.Last)}
}

// Activity is x as the router and the record store use it. It does not
// validate: the API server checks the names and the time first.
func (x *ActorActivity) Activity() names.Activity {
	return names.Activity{Actor: names.ActorKey{Atespace: x.GetAtespace(), Name: x.GetName()},
		Last: x.GetLastActivity().AsTime()}
}
