package failpoint

import (
	"maps"
	"testing"
)

func TestParse(t *testing.T) {
	for spec, want := range map[string]map[string]string{
		"":                         {},
		"a=kill":                   {"a": "kill"},
		" a=kill , b=kill,=x,c":    {"a": "kill", "b": "kill"},
		"retention.after_cas=kill": {"retention.after_cas": "kill"},
	} {
		if got := parse(spec); !maps.Equal(got, want) {
			t.Errorf("parse(%q) = %v, want %v", spec, got, want)
		}
	}
}

func TestHitUnsetDoesNothing(t *testing.T) {
	Hit("anything") // STRATA_FAILPOINTS is not set in tests: returns
}
