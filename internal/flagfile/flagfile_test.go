package flagfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type values struct {
	name   string
	n      int
	d      time.Duration
	on     bool
	config string
}

func flags(v *values) *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.StringVar(&v.name, "name", "default", "")
	fs.IntVar(&v.n, "count", 1, "")
	fs.DurationVar(&v.d, "wait", time.Second, "")
	fs.BoolVar(&v.on, "enabled", true, "")
	fs.StringVar(&v.config, "config-file", "", "")
	fs.BoolP("help", "h", false, "")
	return fs
}

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		args    []string
		want    values
		wantErr string // substring; empty means success
	}{
		{name: "empty file", file: "", want: values{"default", 1, time.Second, true, ""}},
		{name: "file only", file: "name: x\ncount: 3\nwait: 1m30s\nenabled: false\n",
			want: values{"x", 3, 90 * time.Second, false, ""}},
		{name: "quoted values", file: "name: \"7\"\ncount: \"4\"\nenabled: \"false\"\n",
			want: values{"7", 4, time.Second, false, ""}},
		{name: "flag overrides file", file: "name: x\ncount: 3\nwait: 2s\n", args: []string{"--count", "5", "--wait=0s"},
			want: values{"x", 5, 0, true, ""}},
		{name: "unknown key", file: "name: x\nconut: 3\n", wantErr: `unknown key "conut" (keys are count, enabled, name, wait)`},
		{name: "excluded key", file: "config-file: other.yaml\n", wantErr: `unknown key "config-file"`},
		{name: "help key", file: "help: true\n", wantErr: `unknown key "help"`},
		{name: "bad duration", file: "wait: soon\n", wantErr: `wait: "soon" is not a duration like 30s or 5m`},
		{name: "duration without unit", file: "wait: 30\n", wantErr: `wait: "30" is not a duration like 30s or 5m`},
		{name: "bad int", file: "count: many\n", wantErr: `count: "many" is not a whole number`},
		{name: "nested value", file: "name: {a: 1}\n", wantErr: `name: want a single value`},
		{name: "list value", file: "count: [1, 2]\n", wantErr: `count: want a single value`},
		{name: "null value", file: "name:\n", wantErr: `name: no value`},
		{name: "not a mapping", file: "- name\n", wantErr: `cannot unmarshal`},
		{name: "bad yaml", file: "name: [\n", wantErr: `config file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "settings.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			var v values
			fs := flags(&v)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := Apply(fs, path, "config-file")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("Apply = %v; want an error naming %s and containing %q", err, path, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v != tc.want {
				t.Errorf("values = %+v, want %+v", v, tc.want)
			}
		})
	}
}

func TestApplyNoFile(t *testing.T) {
	var v values
	if err := Apply(flags(&v), ""); err != nil {
		t.Errorf("empty path: %v", err)
	}
	err := Apply(flags(&v), filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}
