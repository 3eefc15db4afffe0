package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/snapshot"
)

// Output formats accepted by -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// none fills an empty table cell, as kubectl does, so columns stay aligned
// and an empty value is visibly empty.
const none = "<none>"

// jsonOptions renders API objects in their canonical JSON mapping: lowerCamel
// keys, enums by name, unset fields left out.
var jsonOptions = protojson.MarshalOptions{UseProtoNames: false, EmitUnpopulated: false}

// table describes how a list of T prints as columns.
type table[T proto.Message] struct {
	header []string
	row    func(T) []string
}

// printObjects writes items in format. single selects the shape of JSON and
// YAML output: one object for `get KIND NAME`, {"items": [...]} otherwise.
func printObjects[T proto.Message](w io.Writer, format string, items []T, single bool, t table[T]) error {
	switch format {
	case formatJSON, formatYAML:
		data, err := objectsJSON(items, single)
		if err != nil {
			return err
		}
		if format == formatYAML {
			if data, err = yaml.JSONToYAML(data); err != nil {
				return fmt.Errorf("render yaml: %w", err)
			}
		} else {
			data = append(data, '\n')
		}
		_, err = w.Write(data)
		return err
	default:
		return printTable(w, items, t)
	}
}

// objectsJSON renders items as indented JSON. protojson deliberately varies
// its whitespace between builds to stop people depending on it; we re-indent
// with encoding/json so scripts can rely on `"key": value` exactly.
func objectsJSON[T proto.Message](items []T, single bool) ([]byte, error) {
	raw := make([]json.RawMessage, len(items))
	for i, m := range items {
		b, err := jsonOptions.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("render json: %w", err)
		}
		raw[i] = b
	}
	var compact []byte
	var err error
	if single && len(raw) == 1 {
		compact = raw[0]
	} else {
		compact, err = json.Marshal(struct {
			Items []json.RawMessage `json:"items"`
		}{Items: raw})
		if err != nil {
			return nil, fmt.Errorf("render json: %w", err)
		}
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return nil, fmt.Errorf("render json: %w", err)
	}
	return out.Bytes(), nil
}

// printTable writes aligned columns. Empty cells show as <none>.
func printTable[T proto.Message](w io.Writer, items []T, t table[T]) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, m := range items {
		cells := t.row(m)
		for i, c := range cells {
			if c == "" {
				cells[i] = none
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func actorTable(now time.Time) table[*atev1.Actor] {
	return table[*atev1.Actor]{
		header: []string{"ATESPACE", "NAME", "TEMPLATE", "STATE", "REASON", "WORKER", "SNAPSHOT", "LAST ACTIVITY", "AGE"},
		row: func(x *atev1.Actor) []string {
			return []string{x.GetAtespace(), x.GetName(), x.GetTemplate(), x.GetState().String(), reason(x),
				// The table leaves out the reference's manifest digest
				// (71 characters); -o yaml/json show it.
				x.GetWorker(), snapshot.Bare(x.GetSnapshot()), since(now, x.GetLastActivity()), age(now, x.GetCreateTime())}
		},
	}
}

// withLabels adds a LABELS column to an actor table: k=v pairs sorted by
// key, comma-separated, "<none>" for none (as kubectl's --show-labels).
func withLabels(t table[*atev1.Actor]) table[*atev1.Actor] {
	row := t.row
	return table[*atev1.Actor]{
		header: append(slices.Clone(t.header), "LABELS"),
		row: func(x *atev1.Actor) []string {
			var pairs []string
			for _, k := range slices.Sorted(maps.Keys(x.GetLabels())) {
				pairs = append(pairs, k+"="+x.GetLabels()[k])
			}
			if len(pairs) == 0 {
				pairs = []string{"<none>"}
			}
			return append(row(x), strings.Join(pairs, ","))
		},
	}
}

// reason renders why an actor was checkpointed: "idle", "evicted for
// default/b", "requested", "self-requested"; empty when it was not.
func reason(x *atev1.Actor) string {
	switch x.GetReason() {
	case atev1.CheckpointReason_IDLE:
		return "idle"
	case atev1.CheckpointReason_EVICTED:
		if x.GetEvictedFor() == "" {
			// Made room for an actor the caller may not see.
			return "evicted"
		}
		return "evicted for " + x.GetEvictedFor()
	case atev1.CheckpointReason_REQUESTED:
		return "requested"
	case atev1.CheckpointReason_SELF_REQUESTED:
		return "self-requested"
	default:
		return ""
	}
}

func templateTable(now time.Time) table[*atev1.ActorTemplate] {
	return table[*atev1.ActorTemplate]{
		header: []string{"ATESPACE", "NAME", "PHASE", "IMAGE", "AGE"},
		row: func(x *atev1.ActorTemplate) []string {
			var images []string
			for _, c := range x.GetSpec().GetContainers() {
				images = append(images, c.GetImage())
			}
			return []string{x.GetAtespace(), x.GetName(), phaseCell(x.GetStatus().PhaseOrName()),
				strings.Join(images, ","), age(now, x.GetCreateTime())}
		},
	}
}

// phaseCell is a template's, worker's or node's phase in a table: its
// name, or empty when the server sent none.
func phaseCell[P interface {
	~int32
	String() string
}](p P) string {
	if p == 0 {
		return ""
	}
	return p.String()
}

func workerTable() table[*atev1.Worker] {
	return table[*atev1.Worker]{
		header: []string{"NAME", "NODE", "PHASE", "ACTOR"},
		row: func(x *atev1.Worker) []string {
			return []string{x.GetName(), x.GetNode(), phaseCell(x.PhaseOrName()), x.GetActor()}
		},
	}
}

func nodeTable(now time.Time) table[*atev1.Node] {
	return table[*atev1.Node]{
		header: []string{"NAME", "PHASE", "WORKERS", "FREE", "ADDRESS", "HEARTBEAT", "MESSAGE"},
		row: func(x *atev1.Node) []string {
			return []string{x.GetName(), phaseCell(x.PhaseOrName()), fmt.Sprint(x.GetWorkers()), fmt.Sprint(x.GetFreeWorkers()),
				x.GetAddress(), age(now, x.GetLastHeartbeat()), x.GetMessage()}
		},
	}
}

func atespaceTable(now time.Time) table[*atev1.Atespace] {
	return table[*atev1.Atespace]{
		header: []string{"NAME", "AGE"},
		row: func(x *atev1.Atespace) []string {
			return []string{x.GetName(), age(now, x.GetCreateTime())}
		},
	}
}

// age renders the time since ts the way kubectl does (90s, 5m, 3h, 4d, 2y):
// one unit, coarse enough to read at a glance.
func age(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	d := now.Sub(ts.AsTime())
	switch {
	case d < 0:
		return "0s" // clock skew between client and server
	case d < 2*time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < 2*time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	case d < 2*365*24*time.Hour:
		return strconv.Itoa(int(d.Hours()/24)) + "d"
	default:
		return strconv.Itoa(int(d.Hours()/24/365)) + "y"
	}
}

// since renders the time since ts as "<age> ago", or "" when it is unset.
func since(now time.Time, ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return age(now, ts) + " ago"
}

// printResult reports a mutating verb: the returned object for -o json|yaml,
// else a one-line message such as "actor default/x created".
func printResult[T proto.Message](w io.Writer, format string, obj T, t table[T], msg string) error {
	if format == formatTable {
		_, err := fmt.Fprintln(w, msg)
		return err
	}
	return printObjects(w, format, []T{obj}, true, t)
}
