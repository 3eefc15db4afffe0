package auth

import (
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// Access is the kind of permission a method needs.
type Access int

const (
	// Read: viewer, editor or admin of the atespace.
	Read Access = iota + 1
	// Write: editor or admin of the atespace.
	Write
	// Cluster: admin in every atespace (atespaces, nodes, workers, role
	// bindings, activity).
	Cluster
	// SelfAuthenticating: the request carries its own credential and the
	// handler checks it (NodeIdentity.IssueNodeCertificate, whose caller
	// has no certificate yet and shows a ServiceAccount token); the
	// interceptors let every caller through, with no principal.
	SelfAuthenticating
	// Public: no credential is asked for and no principal set. Only
	// gRPC's health check is (apiserver.StoreHealth): it says whether
	// the server reaches its store, and nothing of any atespace.
	Public
)

// Rule is how one RPC is authorised.
type Rule struct {
	// Verb names the action for messages and docs (get, list, create…).
	Verb   string
	Access Access
	// Atespace reads the atespace from the request (the unary request, or
	// a stream's first client message); nil for Cluster methods. ""
	// returned by a Read method means every atespace: the response is
	// then filtered (Filter) to the atespaces the caller may read.
	Atespace func(req any) string
	// Filter, for Read methods that may span atespaces, drops from resp
	// (a unary response, or one message of a server stream) what the
	// caller may not read: keep reports whether an atespace is readable.
	// It returns false when a stream message must not be sent at all.
	Filter func(resp any, keep func(atespace string) bool) bool
	// Components may call the method whatever the atespace.
	Components []Component
	// Node reads the node name a node may only act for (NodeRegistry).
	Node func(req any) string
	// ComponentsOnly: no user may call the method, whatever their role.
	ComponentsOnly bool
	// Object names what the request addresses ("actor", "template",
	// "tag", "alarm"), for the NOT_FOUND an absent one gets; "" for an
	// atespace-wide request.
	Object string
	// Paged: ListActors, whose page token would name an actor of an
	// atespace the caller cannot read; for a caller who may read only
	// some atespaces an empty atespace is rewritten into a walk over
	// those (pagedList) instead of being filtered.
	Paged bool
	// LookupAlarm: the request names an alarm by id; its atespace comes
	// from the store (Authorizer.AlarmAtespace).
	LookupAlarm bool
}

func filterSlice[T any](list []T, atespace func(T) string, keep func(string) bool) []T {
	out := list[:0]
	for _, x := range list {
		if keep(atespace(x)) {
			out = append(out, x)
		}
	}
	return out
}

var (
	router     = []Component{ComponentRouter}
	controller = []Component{ComponentController}
	routerCtl  = []Component{ComponentRouter, ComponentController}
	node       = []Component{ComponentNode}
)

// Methods maps every Control and NodeRegistry method's full name to its
// rule. A method missing here is refused (PermissionDenied) for everyone,
// and TestEveryMethodHasARule fails.
var Methods = map[string]Rule{
	atev1.Control_CreateAtespace_FullMethodName: {Verb: "create atespace", Access: Cluster},
	atev1.Control_GetAtespace_FullMethodName: {Verb: "get atespace", Access: Read,
		Atespace: func(r any) string { return r.(*atev1.GetAtespaceRequest).GetName() }},
	atev1.Control_ListAtespaces_FullMethodName: {Verb: "list atespaces", Access: Read,
		Atespace: func(any) string { return "" },
		Filter: func(r any, keep func(string) bool) bool {
			resp := r.(*atev1.ListAtespacesResponse)
			resp.Atespaces = filterSlice(resp.Atespaces, (*atev1.Atespace).GetName, keep)
			return true
		}},
	atev1.Control_DeleteAtespace_FullMethodName: {Verb: "delete atespace", Access: Cluster},

	atev1.Control_CreateActorTemplate_FullMethodName: {Verb: "create template", Access: Write, Object: "template",
		Atespace: func(r any) string { return r.(*atev1.CreateActorTemplateRequest).GetTemplate().GetAtespace() }},
	atev1.Control_GetActorTemplate_FullMethodName: {Verb: "get template", Access: Read, Object: "template", Components: router,
		Atespace: func(r any) string { return r.(*atev1.GetActorTemplateRequest).GetAtespace() }},
	atev1.Control_ListActorTemplates_FullMethodName: {Verb: "list templates", Access: Read,
		Atespace: func(r any) string { return r.(*atev1.ListActorTemplatesRequest).GetAtespace() },
		Filter: func(r any, keep func(string) bool) bool {
			resp := r.(*atev1.ListActorTemplatesResponse)
			resp.Templates = filterSlice(resp.Templates, (*atev1.ActorTemplate).GetAtespace, keep)
			return true
		}},
	atev1.Control_DeleteActorTemplate_FullMethodName: {Verb: "delete template", Access: Write, Object: "template",
		Atespace: func(r any) string { return r.(*atev1.DeleteActorTemplateRequest).GetAtespace() }},

	atev1.Control_CreateActor_FullMethodName: {Verb: "create actor", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.CreateActorRequest).GetActor().GetAtespace() }},
	atev1.Control_GetActor_FullMethodName: {Verb: "get actor", Access: Read, Object: "actor", Components: router,
		Atespace: func(r any) string { return r.(*atev1.GetActorRequest).GetAtespace() }},
	atev1.Control_ListActors_FullMethodName: {Verb: "list actors", Access: Read, Paged: true,
		Atespace: func(r any) string { return r.(*atev1.ListActorsRequest).GetAtespace() },
		Filter: func(r any, keep func(string) bool) bool {
			resp := r.(*atev1.ListActorsResponse)
			resp.Actors = filterSlice(resp.Actors, (*atev1.Actor).GetAtespace, keep)
			return true
		}},
	atev1.Control_UpdateActor_FullMethodName: {Verb: "update actor", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.UpdateActorRequest).GetAtespace() }},
	atev1.Control_DeleteActor_FullMethodName: {Verb: "delete actor", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.DeleteActorRequest).GetAtespace() }},
	atev1.Control_SuspendActor_FullMethodName: {Verb: "suspend actor", Access: Write, Object: "actor", Components: router,
		Atespace: func(r any) string { return r.(*atev1.SuspendActorRequest).GetAtespace() }},
	atev1.Control_ResumeActor_FullMethodName: {Verb: "resume actor", Access: Write, Object: "actor", Components: router,
		Atespace: func(r any) string { return r.(*atev1.ResumeActorRequest).GetAtespace() }},
	atev1.Control_PauseActor_FullMethodName: {Verb: "pause actor", Access: Write, Object: "actor", Components: router,
		Atespace: func(r any) string { return r.(*atev1.PauseActorRequest).GetAtespace() }},
	atev1.Control_RevertActor_FullMethodName: {Verb: "revert actor", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.RevertActorRequest).GetAtespace() }},
	// The router reports traffic for every atespace it serves.
	atev1.Control_RecordActivity_FullMethodName: {Verb: "record activity", Access: Cluster, Components: router},

	atev1.Control_ListWorkers_FullMethodName: {Verb: "list workers", Access: Cluster, Components: routerCtl},
	atev1.Control_ListNodes_FullMethodName:   {Verb: "list nodes", Access: Cluster, Components: controller},
	atev1.Control_DrainNode_FullMethodName:   {Verb: "drain node", Access: Cluster, Components: controller},
	atev1.Control_RemoveNode_FullMethodName:  {Verb: "remove node", Access: Cluster, Components: controller},

	atev1.Control_SetAlarm_FullMethodName: {Verb: "set alarm", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.SetAlarmRequest).GetAtespace() }},
	atev1.Control_ListAlarms_FullMethodName: {Verb: "list alarms", Access: Read,
		Atespace: func(r any) string { return r.(*atev1.ListAlarmsRequest).GetAtespace() },
		Filter: func(r any, keep func(string) bool) bool {
			resp := r.(*atev1.ListAlarmsResponse)
			resp.Alarms = filterSlice(resp.Alarms, (*atev1.Alarm).GetAtespace, keep)
			return true
		}},
	atev1.Control_CancelAlarm_FullMethodName: {Verb: "cancel alarm", Access: Write, LookupAlarm: true, Object: "alarm"},

	atev1.Control_TagActor_FullMethodName: {Verb: "tag actor", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.TagActorRequest).GetAtespace() }},
	atev1.Control_GetTag_FullMethodName: {Verb: "get tag", Access: Read, Object: "tag",
		Atespace: func(r any) string { return r.(*atev1.GetTagRequest).GetAtespace() }},
	atev1.Control_ListTags_FullMethodName: {Verb: "list tags", Access: Read,
		Atespace: func(r any) string { return r.(*atev1.ListTagsRequest).GetAtespace() },
		Filter: func(r any, keep func(string) bool) bool {
			resp := r.(*atev1.ListTagsResponse)
			resp.Tags = filterSlice(resp.Tags, (*atev1.Tag).GetAtespace, keep)
			return true
		}},
	atev1.Control_DeleteTag_FullMethodName: {Verb: "delete tag", Access: Write, Object: "tag",
		Atespace: func(r any) string { return r.(*atev1.DeleteTagRequest).GetAtespace() }},

	atev1.Control_ListEvents_FullMethodName: {Verb: "list events", Access: Read,
		Atespace: func(r any) string { return r.(*atev1.ListEventsRequest).GetAtespace() },
		Filter: func(r any, keep func(string) bool) bool {
			resp := r.(*atev1.ListEventsResponse)
			resp.Events = filterSlice(resp.Events, (*atev1.Event).GetAtespace, keep)
			return true
		}},
	atev1.Control_WatchEvents_FullMethodName: {Verb: "watch events", Access: Read,
		Atespace: func(r any) string { return r.(*atev1.WatchEventsRequest).GetAtespace() },
		Filter: func(r any, keep func(string) bool) bool {
			return keep(r.(*atev1.Event).GetAtespace())
		}},
	atev1.Control_ActorLogs_FullMethodName: {Verb: "read logs", Access: Read, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.ActorLogsRequest).GetAtespace() }},
	// Exec and copies run code in, or read the data of, an actor: an
	// editor's, not a viewer's.
	atev1.Control_ExecActor_FullMethodName: {Verb: "exec in actor", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.ExecActorRequest).GetStart().GetAtespace() }},
	atev1.Control_CopyToActor_FullMethodName: {Verb: "copy to actor", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.CopyToActorRequest).GetTarget().GetAtespace() }},
	atev1.Control_CopyFromActor_FullMethodName: {Verb: "copy from actor", Access: Write, Object: "actor",
		Atespace: func(r any) string { return r.(*atev1.CopyFromActorRequest).GetTarget().GetAtespace() }},

	// Ingress tokens let callers through the router into an atespace's
	// token-policy actors: minting or revoking one is an editor's act,
	// seeing that they exist (never a secret) a viewer's.
	atev1.Control_CreateIngressToken_FullMethodName: {Verb: "create ingresstoken", Access: Write, Object: "ingresstoken",
		Atespace: func(r any) string { return r.(*atev1.CreateIngressTokenRequest).GetAtespace() }},
	atev1.Control_ListIngressTokens_FullMethodName: {Verb: "list ingresstokens", Access: Read,
		Atespace: func(r any) string { return r.(*atev1.ListIngressTokensRequest).GetAtespace() },
		Filter: func(r any, keep func(string) bool) bool {
			resp := r.(*atev1.ListIngressTokensResponse)
			resp.Tokens = filterSlice(resp.Tokens, (*atev1.IngressToken).GetAtespace, keep)
			return true
		}},
	atev1.Control_DeleteIngressToken_FullMethodName: {Verb: "delete ingresstoken", Access: Write, Object: "ingresstoken",
		Atespace: func(r any) string { return r.(*atev1.DeleteIngressTokenRequest).GetAtespace() }},
	// The router's question "may this bearer in?": an oracle for
	// guessing tokens were users allowed to ask it.
	atev1.Control_ReviewIngressToken_FullMethodName: {Verb: "review ingress token", Access: Cluster, Components: router, ComponentsOnly: true},

	atev1.Control_CreateRoleBinding_FullMethodName: {Verb: "create rolebinding", Access: Cluster},
	atev1.Control_ListRoleBindings_FullMethodName:  {Verb: "list rolebindings", Access: Cluster},
	atev1.Control_DeleteRoleBinding_FullMethodName: {Verb: "delete rolebinding", Access: Cluster},

	// Nodes only, each for its own name (its certificate's).
	atev1.NodeRegistry_Register_FullMethodName: {Verb: "register node", Access: Cluster, Components: node, ComponentsOnly: true,
		Node: func(r any) string { return r.(*atev1.NodeMessage).GetHello().GetNode() }},
	atev1.NodeRegistry_SetSelfAlarm_FullMethodName: {Verb: "set self alarm", Access: Cluster, Components: node, ComponentsOnly: true,
		Node: func(r any) string { return r.(*atev1.SetSelfAlarmRequest).GetNode() }},
	// An actor's self-service call relayed by the node its worker is
	// on: the API server checks the worker's assignment, the rule that
	// the node relays only for its own workers.
	atev1.NodeRegistry_SelfCall_FullMethodName: {Verb: "relay self call", Access: Cluster, Components: node, ComponentsOnly: true,
		Node: func(r any) string { return r.(*atev1.SelfCallRequest).GetNode() }},
	atev1.NodeIdentity_IssueNodeCertificate_FullMethodName: {Verb: "issue node certificate", Access: SelfAuthenticating},

	// Probes: clients moving a state change off a replica cut from its
	// store (apidial), load balancers.
	healthpb.Health_Check_FullMethodName: {Verb: "check health", Access: Public},
}
