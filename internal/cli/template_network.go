package cli

import atev1 "substrate.dev/ate/api/ate/v1"

// networkFields are the template fields of the sandbox boundary
// (docs/security.md, The sandbox boundary):
//
//	network:
//	  egress:                               # TCP destinations allowed
//	  - {cidr: 10.0.0.0/8, ports: [443]}    # a prefix or address
//	  - {host: api.example.com}             # resolved by the node; any port
//
// The server validates them; the client only carries them.
type networkFields struct {
	Network *networkFile `json:"network,omitempty"`
}

type networkFile struct {
	Egress []egressRuleFile `json:"egress,omitempty"`
}

type egressRuleFile struct {
	CIDR  string  `json:"cidr,omitempty"`
	Host  string  `json:"host,omitempty"`
	Ports []int32 `json:"ports,omitempty"`
}

func (n networkFields) apply(spec *atev1.ActorTemplateSpec) {
	if n.Network == nil {
		return
	}
	spec.Network = &atev1.NetworkPolicy{}
	for _, r := range n.Network.Egress {
		spec.Network.Egress = append(spec.Network.Egress, &atev1.EgressRule{Cidr: r.CIDR, Host: r.Host, Ports: r.Ports})
	}
}
