package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// newEventsCommand is `ate get events`.
func newEventsCommand(a *app) *cobra.Command {
	var actor string
	var watch bool
	var limit int32
	cmd := &cobra.Command{
		Use: "events", Aliases: []string{"event"},
		Short: "Show actors' state transitions and failures in the atespace (or one actor's, --actor), oldest first; -w follows new ones",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return a.getEvents(cmd, actor, watch, limit) },
	}
	cmd.Flags().StringVar(&actor, "actor", "", "only this actor's events (NAME or ATESPACE/NAME)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the list, print new events as they happen until interrupted")
	cmd.Flags().Int32Var(&limit, "limit", 100, "how many of the newest events to list (1-10000)")
	return cmd
}

func (a *app) getEvents(cmd *cobra.Command, actor string, watch bool, limit int32) error {
	atespace, actor, err := a.actorFilter(actor)
	if err != nil {
		return err
	}
	if limit < 1 || limit > 10000 {
		return fmt.Errorf("--limit %d is out of range: give 1 to 10000", limit)
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	resp, err := call(cmd.Context(), s, s.client.ListEvents, &atev1.ListEventsRequest{Atespace: atespace, Actor: actor, Limit: limit})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if !watch {
		if len(resp.GetEvents()) == 0 && a.output == formatTable {
			fmt.Fprintf(cmd.ErrOrStderr(), "No events found in atespace %s.\n", atespace)
			return nil
		}
		return printObjects(out, a.output, resp.GetEvents(), false, eventTable())
	}
	p := newStreamPrinter(out, a.output, eventTable())
	var after int64
	for _, e := range resp.GetEvents() {
		if err := p.print(e); err != nil {
			return err
		}
		after = e.GetSeq()
	}
	// after 0 (none listed): every kept event, so none written since the
	// list is missed.
	return a.watchEvents(cmd.Context(), s, &atev1.WatchEventsRequest{Atespace: atespace, Actor: actor, AfterSeq: after},
		func(e *atev1.Event) error { return p.print(e) })
}

// watchEvents calls each for every event the server streams for req until
// ctx ends (nil then) or the stream fails.
func (a *app) watchEvents(ctx context.Context, s *session, req *atev1.WatchEventsRequest, each func(*atev1.Event) error) error {
	stream, err := s.client.WatchEvents(ctx, req)
	if err != nil {
		return s.apiError(ctx, err)
	}
	for {
		e, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return s.apiError(ctx, err)
		}
		if err := each(e); err != nil {
			return err
		}
	}
}

// actorFilter resolves an --actor flag (NAME or ATESPACE/NAME, or empty)
// to the atespace and actor name a list is filtered by: the -n atespace
// and no actor when empty.
func (a *app) actorFilter(flag string) (atespace, actor string, err error) {
	if flag == "" {
		atespace, err = a.atespaceName()
		return atespace, "", err
	}
	key, err := a.actorKey(flag)
	if err != nil {
		return "", "", err
	}
	return key.Atespace, key.Name, nil
}

func eventTable() table[*atev1.Event] {
	return table[*atev1.Event]{
		header: []string{"TIME", "TYPE", "ACTOR", "FROM", "TO", "WORKER", "NODE", "MESSAGE"},
		row: func(e *atev1.Event) []string {
			return []string{e.GetTime().AsTime().Local().Format(time.RFC3339), e.GetType(), e.GetAtespace() + "/" + e.GetActor(),
				e.GetFromState(), e.GetToState(), e.GetWorker(), e.GetNode(), e.GetMessage()}
		},
	}
}

// streamPrinter prints objects one at a time as they arrive: table rows
// under one header (each flushed at once, so columns align only within
// what a flush holds), one compact JSON object per line, or YAML
// documents separated by "---", which scripts can read as they come.
type streamPrinter[T proto.Message] struct {
	w      io.Writer
	format string
	t      table[T]
	header bool
}

func newStreamPrinter[T proto.Message](w io.Writer, format string, t table[T]) *streamPrinter[T] {
	return &streamPrinter[T]{w: w, format: format, t: t}
}

func (p *streamPrinter[T]) print(x T) error {
	switch p.format {
	case formatJSON, formatYAML:
		b, err := jsonOptions.Marshal(x)
		if err != nil {
			return fmt.Errorf("render json: %w", err)
		}
		if p.format == formatYAML {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return fmt.Errorf("render yaml: %w", err)
			}
			b = append([]byte("---\n"), b...)
		} else {
			var c bytes.Buffer
			if err := json.Compact(&c, b); err != nil {
				return fmt.Errorf("render json: %w", err)
			}
			b = append(c.Bytes(), '\n')
		}
		_, err = p.w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 8, 3, ' ', 0)
	if !p.header {
		fmt.Fprintln(tw, strings.Join(p.t.header, "\t"))
		p.header = true
	}
	cells := p.t.row(x)
	for i, c := range cells {
		if c == "" {
			cells[i] = none
		}
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
	return tw.Flush()
}
