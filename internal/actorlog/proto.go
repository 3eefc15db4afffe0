package actorlog

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// ToProto returns l as the API's ActorLogLine.
func ToProto(l Line) *atev1.ActorLogLine {
	return &atev1.ActorLogLine{Run: l.Run, Seq: l.Seq, Time: timestamppb.New(l.Time), Kind: l.Kind, Text: l.Text, Node: l.Node, Worker: l.Worker}
}

// FromProto returns p as a Line.
func FromProto(p *atev1.ActorLogLine) Line {
	return Line{Run: p.GetRun(), Seq: p.GetSeq(), Time: p.GetTime().AsTime(), Kind: p.GetKind(), Text: p.GetText(), Node: p.GetNode(), Worker: p.GetWorker()}
}
