// Package flagfile reads a YAML file of settings for a command's flags: a
// mapping whose keys are the flags' long names, without the dashes, and
// whose values are what the flags take on the command line:
//
//	workers: 8
//	park-budget: 45s
//	standbys: false
//
// The file thus has exactly the settings the flags have, parsed the same
// way (a duration is a Go duration string, "45s"), and a flag given on the
// command line overrides the file.
package flagfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// Apply reads the file at path and sets every flag of fs it names that the
// command line did not set (pflag's Changed). It fails, naming the key,
// on a key that is not a flag of fs or is one of exclude (e.g. the flag
// that names the file) and on a value that is not a single scalar, before
// setting any flag, and on a value the flag refuses (flags set before it
// keep their values: the command is expected to fail). An empty path
// applies nothing.
func Apply(fs *pflag.FlagSet, path string, exclude ...string) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	values, err := parse(fs, data, exclude)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	for _, v := range values {
		if err := v.flag.Value.Set(v.value); err != nil {
			// pflag's own text names Go's parser (strconv.ParseInt: …);
			// the file's reader wants the key, the value and the type.
			return fmt.Errorf("config file %s: %s: %q is not %s", path, v.flag.Name, v.value, kind(v.flag.Value.Type()))
		}
	}
	return nil
}

// setting is one key of the file, resolved to its flag.
type setting struct {
	flag  *pflag.Flag
	value string
}

// parse checks every key and the shape of every value, and returns the
// settings of flags the command line did not set, in key order.
func parse(fs *pflag.FlagSet, data []byte, exclude []string) ([]setting, error) {
	var raw map[string]json.RawMessage
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []setting
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || f.Name == "help" || slices.Contains(exclude, k) {
			return nil, fmt.Errorf("unknown key %q (keys are %s)", k, strings.Join(flagKeys(fs, exclude...), ", "))
		}
		v, err := scalar(raw[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if f.Changed {
			continue
		}
		out = append(out, setting{flag: f, value: v})
	}
	return out, nil
}

// scalar turns a YAML value (as JSON) into the text a flag parses.
func scalar(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", fmt.Errorf("no value")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case raw[0] == '{' || raw[0] == '[':
		return "", fmt.Errorf("want a single value, got %s", raw)
	default: // a number or a boolean, as written
		return string(raw), nil
	}
}

// flagKeys lists the keys a file for fs may hold, sorted: the long names of
// its flags but help and exclude.
func flagKeys(fs *pflag.FlagSet, exclude ...string) []string {
	var keys []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && !slices.Contains(exclude, f.Name) {
			keys = append(keys, f.Name)
		}
	})
	slices.Sort(keys)
	return keys
}

// kind says in words what a flag of pflag type typ takes.
func kind(typ string) string {
	switch typ {
	case "int", "int32", "int64", "uint", "uint32", "uint64":
		return "a whole number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration like 30s or 5m"
	default:
		return "a valid " + typ
	}
}
