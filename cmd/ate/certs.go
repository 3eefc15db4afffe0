package main

import (
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/pki"
)

// certsCommand returns `ate certs`: a CA and component certificates for
// installations across machines (docs/security.md).
func certsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "certs", Short: "Make the CA and the components' certificates for mutual TLS (ate apiserver|node|router|controller --tls-dir)"}
	var initDir, trustDomain string
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create a CA (ca.crt, ca.key) in --dir; an existing one is kept",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, created, err := pki.InitCA(initDir, trustDomain)
			if err != nil {
				return err
			}
			verb := "kept the existing"
			if created {
				verb = "created"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s CA %q in %s (valid until %s)\n", verb, ca.Cert.Subject.CommonName, initDir, ca.Cert.NotAfter.Format(time.RFC3339))
			return nil
		},
	}
	initCmd.Flags().StringVar(&initDir, "dir", "", "directory of the CA (created 0700; ca.key is 0600)")
	initCmd.Flags().StringVar(&trustDomain, "trust-domain", auth.DefaultTrustDomain, "trust domain named in the CA's name")
	_ = initCmd.MarkFlagRequired("dir")

	var (
		caDir, component, name, out string
		dns                         []string
		ips                         []net.IP
		ttl                         time.Duration
	)
	issueCmd := &cobra.Command{
		Use:   "issue",
		Short: "Issue a component's certificate into --out (ca.crt, tls.crt, tls.key), the layout --tls-dir reads",
		Long: `Issue a component's certificate into --out (ca.crt, tls.crt, tls.key), the layout --tls-dir reads.

Its URI SAN spiffe://<trust domain>/ate/<component>/<name> is the component's
identity; a node's --name must be the node's name. Each file is replaced
atomically, so issuing again into a running component's --tls-dir rotates it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := pki.LoadCA(caDir)
			if err != nil {
				return err
			}
			leaf, err := ca.IssueToDir(pki.LeafRequest{Identity: auth.Identity{Component: auth.Component(component), Name: name},
				TrustDomain: trustDomain, DNS: dns, IPs: ips, TTL: ttl}, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "issued %s in %s (valid until %s)\n", leaf.URIs[0], out, leaf.NotAfter.Format(time.RFC3339))
			return nil
		},
	}
	f := issueCmd.Flags()
	f.StringVar(&caDir, "ca-dir", "", "directory of the CA (ate certs init --dir)")
	f.StringVar(&component, "component", "", "apiserver, node, router or controller")
	f.StringVar(&name, "name", "", "the component's name (a node's must be its --name)")
	f.StringArrayVar(&dns, "dns", nil, "DNS name SAN (repeatable): how clients that check host names reach it")
	f.IPSliceVar(&ips, "ip", nil, "IP address SAN (repeatable)")
	f.DurationVar(&ttl, "ttl", pki.DefaultLeafTTL, "life of the certificate; issue again before it ends")
	f.StringVar(&trustDomain, "trust-domain", auth.DefaultTrustDomain, "SPIFFE trust domain of the identity")
	f.StringVar(&out, "out", "", "output directory (created 0700; tls.key is 0600)")
	for _, r := range []string{"ca-dir", "component", "name", "out"} {
		_ = issueCmd.MarkFlagRequired(r)
	}
	cmd.AddCommand(initCmd, issueCmd, secretsCommand())
	return cmd
}

// secretsCommand returns `ate certs secrets`.
func secretsCommand() *cobra.Command {
	var (
		caDir string
		req   = pki.KubernetesSecretsRequest{}
	)
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Print the Kubernetes Secrets of a TLS installation without cert-manager, for kubectl apply -f -",
		Long: `Print the Kubernetes Secrets of a TLS installation without cert-manager (the
Helm chart's tls.mode secret, the kustomize base), as YAML for kubectl apply:
ate-apiserver-tls, ate-router-tls and ate-controller-tls (ca.crt, tls.crt,
tls.key, freshly issued from the CA in --ca-dir, --ttl long), and the CA's own
Secret (tls.crt, tls.key), which the API server signs worker Pods' node
certificates with.

  ate certs init --dir ca
  ate certs secrets --ca-dir ca | kubectl -n ate-system apply -f -

Run it again before --ttl runs out: the apply replaces the Secrets and the
components re-read the files.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := pki.LoadCA(caDir)
			if err != nil {
				return err
			}
			secrets, err := ca.KubernetesSecrets(req)
			if err != nil {
				return err
			}
			for _, s := range secrets {
				b, err := yaml.Marshal(s)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "---\n%s", b)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&caDir, "ca-dir", "", "directory of the CA (ate certs init --dir)")
	f.StringVar(&req.Namespace, "namespace", "ate-system", "namespace of the installation")
	f.StringVar(&req.CASecret, "ca-secret", "ate-ca", "name of the CA's Secret (the chart's tls.certManager.caSecret)")
	f.StringVar(&req.TrustDomain, "trust-domain", auth.DefaultTrustDomain, "SPIFFE trust domain of the identities (the chart's tls.trustDomain)")
	f.StringVar(&req.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain, for the API server's Service names")
	f.DurationVar(&req.TTL, "ttl", 720*time.Hour, "life of the components' certificates; run again before it ends")
	_ = cmd.MarkFlagRequired("ca-dir")
	return cmd
}
