package up

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/ateconfig"
	"substrate.dev/ate/internal/names"
)

// DemoActor is the actor `ate up --demo` creates.
const DemoActor = "counter-1"

// demo creates the template in cfg.Template and actor counter-1 in the
// default atespace, unless they exist, and prints how to reach the actor.
func demo(ctx context.Context, c atev1.ControlClient, cfg DemoConfig, info Info, log *slog.Logger) error {
	tpl, err := cfg.LoadTemplate(cfg.Template)
	if err != nil {
		return err
	}
	tpl.Atespace = names.DefaultAtespace
	if _, err := c.CreateActorTemplate(ctx, &atev1.CreateActorTemplateRequest{Template: tpl}); err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create template %s: %w", tpl.Name, err)
	}
	_, err = c.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{
		Atespace: names.DefaultAtespace, Name: DemoActor, Template: tpl.Name}})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create actor %s: %w", DemoActor, err)
	}
	log.Info("demo actor ready", "actor", DemoActor, "template", tpl.Name)
	fmt.Fprintf(os.Stdout, `
Substrate is up. Actor default/%[1]s (template %[2]s) answers at:
  curl -s -H 'Host: %[1]s.default.actors.localhost' http://%[3]s/
  curl -s -H 'ate-target-actor: default/%[1]s' http://%[3]s/
Suspend it and watch the next request resume it:
  %[5]s suspend actor %[1]s && %[5]s get actor %[1]s
(client config: %[4]s)
`, DemoActor, tpl.Name, info.RouterAddr, info.ConfigPath, cliFor(info.ConfigPath, os.Getenv))
	return nil
}

// cliFor is how to run the CLI against the client config at path: plain
// when the CLI finds that file by itself ($ATE_CONFIG, else
// ~/.ate/config.yaml), else with --config (ate up --data-dir DIR).
func cliFor(path string, getenv func(string) string) string {
	if found, err := ateconfig.Path("", getenv); err == nil && found == path {
		return "bin/ate"
	}
	return "bin/ate --config " + path
}
