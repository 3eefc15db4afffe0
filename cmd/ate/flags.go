package main

import (
	"strconv"

	"github.com/spf13/pflag"
)

// negatedBool is a boolean flag stored inverted: `--standbys=false` sets
// node.Config.NoStandbys, whose zero value is the default.
type negatedBool struct{ p *bool }

func (b negatedBool) String() string { return strconv.FormatBool(!*b.p) }
func (b negatedBool) Type() string   { return "bool" }

func (b negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = !v
	return nil
}

// negatedBoolVar defines boolean flag name, default true, which sets *p
// to the opposite of its value.
func negatedBoolVar(f *pflag.FlagSet, p *bool, name, usage string) {
	*p = false
	f.Var(negatedBool{p}, name, usage)
	// A bare --name means true, as for any boolean flag.
	f.Lookup(name).NoOptDefVal = "true"
}
