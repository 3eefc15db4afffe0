package cli

import (
	"errors"
	"fmt"
	"io/fs"

	"substrate.dev/ate/internal/ateconfig"
)

// clientConfig finds the server address from --server and the config file.
// --server alone is enough; the file is still read when present so that
// future settings (tokens) apply to an overridden address too.
func (a *app) clientConfig() (ateconfig.Config, error) {
	path, err := ateconfig.Path(a.configFlag, a.getenv)
	if err != nil {
		return ateconfig.Config{}, err
	}
	c, err := ateconfig.Load(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && a.server != "":
		c = ateconfig.Config{}
	case errors.Is(err, fs.ErrNotExist):
		return ateconfig.Config{}, fmt.Errorf("no client config at %s: run `ate up` to start a local server (it writes this file) or pass --server HOST:PORT", path)
	case err != nil:
		return ateconfig.Config{}, err
	}
	if a.server != "" {
		c.Server = a.server
	}
	if c.Server == "" {
		return ateconfig.Config{}, fmt.Errorf("client config %s sets no server: run `ate up` or pass --server HOST:PORT", path)
	}
	return c, nil
}
