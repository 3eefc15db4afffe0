package nodeapi

import "testing"

func TestParseClass(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Class
		wantErr bool
	}{
		{"", ClassGvisor, false}, // the default
		{"gvisor", ClassGvisor, false},
		{"fake", ClassFake, false},
		{"kata", "", true}, // a valid name on the wire, not one this binary runs
		{"GVISOR", "", true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseClass(tc.in)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("ParseClass(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
	if _, err := ParseClass("kata"); err == nil || err.Error() != `unknown sandbox class "kata": use gvisor or fake` {
		t.Errorf("ParseClass(kata) error = %v", err)
	}
}

func TestClassOf(t *testing.T) {
	for in, want := range map[string]Class{"": DefaultClass, "gvisor": ClassGvisor, "fake": ClassFake, "kata": "kata"} {
		if got := ClassOf(in); got != want || got.String() != string(want) {
			t.Errorf("ClassOf(%q) = %q, want %q", in, got, want)
		}
	}
}
