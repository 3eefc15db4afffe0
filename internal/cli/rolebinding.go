package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// newCreateRoleBindingCommand is `ate create rolebinding`.
func newCreateRoleBindingCommand(a *app) *cobra.Command {
	var role string
	var users, groups []string
	cmd := &cobra.Command{
		Use:   "rolebinding NAME --role admin|editor|viewer (--user U | --group G)...",
		Short: "Grant a role to users and groups in an atespace (admin: in every atespace unless -n is given)",
		Example: `  ate create rolebinding web-editors --role editor -n web --user alice --group devs
  ate create rolebinding ci --role viewer -n web --user system:serviceaccount:ci:deployer
  ate create rolebinding ops --role admin --group ops
  ate create rolebinding auditors --role viewer -n '*' --group audit`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			atespace := ""
			if cmd.Flags().Changed(flagAtespace) || role != "admin" {
				atespace = a.atespace
			}
			return a.createRoleBinding(cmd, &atev1.RoleBinding{Name: args[0], Atespace: atespace, Role: role, Users: users, Groups: groups})
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "admin, editor or viewer (required)")
	cmd.Flags().StringArrayVar(&users, "user", nil, "a user name (a static token's user, an OIDC subject with its prefix, system:serviceaccount:NS:NAME); repeatable")
	cmd.Flags().StringArrayVar(&groups, "group", nil, "a group name; repeatable")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func (a *app) createRoleBinding(cmd *cobra.Command, b *atev1.RoleBinding) error {
	if err := names.ValidateLabel("rolebinding", b.GetName()); err != nil {
		return err
	}
	if len(b.Users)+len(b.Groups) == 0 {
		return fmt.Errorf("rolebinding %s: name at least one --user or --group", b.GetName())
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	out, err := call(cmd.Context(), s, s.client.CreateRoleBinding, &atev1.CreateRoleBindingRequest{Binding: b})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "rolebinding %s created (%s in %s)\n", out.GetName(), out.GetRole(), atespaceScope(out.GetAtespace()))
	return err
}

func atespaceScope(atespace string) string {
	if atespace == "" || atespace == "*" {
		return "every atespace"
	}
	return "atespace " + atespace
}

func (a *app) getRoleBindings(cmd *cobra.Command, args []string) error {
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	resp, err := call(cmd.Context(), s, s.client.ListRoleBindings, &atev1.ListRoleBindingsRequest{})
	if err != nil {
		return err
	}
	list := resp.GetBindings()
	if len(args) == 1 {
		var one []*atev1.RoleBinding
		for _, b := range list {
			if b.GetName() == args[0] {
				one = append(one, b)
			}
		}
		if len(one) == 0 {
			return fmt.Errorf("rolebinding %s not found", args[0])
		}
		return printObjects(cmd.OutOrStdout(), a.output, one, true, roleBindingTable(a.now()))
	}
	if len(list) == 0 && a.output == formatTable {
		fmt.Fprintln(cmd.ErrOrStderr(), "No role bindings found.")
		return nil
	}
	return printObjects(cmd.OutOrStdout(), a.output, list, false, roleBindingTable(a.now()))
}

func roleBindingTable(now time.Time) table[*atev1.RoleBinding] {
	return table[*atev1.RoleBinding]{
		header: []string{"NAME", "ROLE", "ATESPACE", "USERS", "GROUPS", "AGE"},
		row: func(b *atev1.RoleBinding) []string {
			ns := b.GetAtespace()
			if ns == "" {
				ns = "*"
			}
			return []string{b.GetName(), b.GetRole(), ns, strings.Join(b.GetUsers(), ","), strings.Join(b.GetGroups(), ","), age(now, b.GetCreateTime())}
		},
	}
}

func (a *app) deleteRoleBinding(cmd *cobra.Command, name string) error {
	if err := names.ValidateLabel("rolebinding", name); err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := call(cmd.Context(), s, s.client.DeleteRoleBinding, &atev1.DeleteRoleBindingRequest{Name: name}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "rolebinding %s deleted\n", name)
	return err
}
