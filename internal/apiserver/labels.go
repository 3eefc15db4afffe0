package apiserver

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// maxLabels bounds how many labels an actor carries.
const maxLabels = 64

// validateLabels checks an actor's labels against Kubernetes' label rules:
// each key a qualified name ([DNS-subdomain prefix/]name of at most 63
// characters), each value a label value (at most 63 characters,
// alphanumeric at both ends, '-', '_' and '.' inside, or empty), at most
// maxLabels of them. It returns an errInvalid error naming the first bad
// key or value in key order.
func validateLabels(m map[string]string) error {
	if len(m) > maxLabels {
		return fmt.Errorf("%w: actor has %d labels, at most %d", errInvalid, len(m), maxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("%w: label key %q: %s", errInvalid, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(m[k]); len(errs) > 0 {
			return fmt.Errorf("%w: label %q value %q: %s", errInvalid, k, m[k], strings.Join(errs, "; "))
		}
	}
	return nil
}

// parseLabelSelector parses a Kubernetes label selector ("a=b,c!=d",
// "env in (x,y)", "!legacy"); an empty one matches everything. A selector
// that does not parse is an errInvalid error quoting it.
func parseLabelSelector(sel string) (labels.Selector, error) {
	s, err := labels.Parse(sel)
	if err != nil {
		return nil, fmt.Errorf("%w: label_selector %q: %w", errInvalid, sel, err)
	}
	return s, nil
}
