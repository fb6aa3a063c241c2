package discovery

import (
	"encoding/json"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// A hook node-drainer puts names, in its NotificationMetadata, the
// deployments that put it (each by its function's name):
//
//	{"node-drainer":["node-drainer-prod"]}
//
// A removal takes only the hooks that name its deployment: the hook goes
// when it names no other, else it is put again without the name. Two
// deployments listing one group, a Create rolled back, a hook put by hand:
// none loses a hook another put. Auto Scaling keeps the metadata with the
// hook and sends it in each lifecycle event (NotificationMetadata), where
// node-drainer does not read it. terraform's hook resources carry the same
// (main.tf), so that the sweep finds them its own.

// markDoc is the metadata: one key, the owners.
type markDoc struct {
	Owners *[]string `json:"node-drainer"`
}

// Owners are the deployments hook's mark names; marked is false when it
// has none (put by hand, by another tool, or by a node-drainer before the
// marks).
func Owners(h astypes.LifecycleHook) (owners []string, marked bool) {
	var m markDoc
	if json.Unmarshal([]byte(aws.ToString(h.NotificationMetadata)), &m) != nil || m.Owners == nil {
		return nil, false
	}
	return *m.Owners, true
}

// Mark is the NotificationMetadata naming owners.
func Mark(owners []string) string {
	o := slices.Clone(owners)
	if o == nil {
		o = []string{}
	}
	b, _ := json.Marshal(markDoc{Owners: &o}) // a []string always marshals
	return string(b)
}

// withOwner is owners with owner in the place of replaced (a deployment
// whose function was renamed), sorted.
func withOwner(owners []string, owner, replaced string) []string {
	next := slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == replaced || o == owner })
	next = append(next, owner)
	slices.Sort(next)
	return next
}

// metadata is the NotificationMetadata to put want with over cur (nil: no
// hook of its name there); put false: cur is left as it is. Without an
// owner, a hook is put as before marks (its metadata kept). claim: a hook
// with no mark is the deployment's (a node-drainer put it before marks);
// otherwise it is not the deployment's to change.
func (want Hook) metadata(cur *astypes.LifecycleHook, claim bool) (meta *string, put bool) {
	switch {
	case cur == nil && want.Owner == "":
		return nil, true
	case cur == nil:
		return aws.String(Mark([]string{want.Owner})), true
	case want.Owner == "":
		return cur.NotificationMetadata, !matches(*cur, want)
	}
	owners, marked := Owners(*cur)
	if !marked && !claim {
		return nil, false
	}
	next := withOwner(owners, want.Owner, want.Replaces)
	if matches(*cur, want) && slices.Equal(next, owners) {
		return nil, false
	}
	return aws.String(Mark(next)), true
}
