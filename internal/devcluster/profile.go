package devcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvProfile names the variable that points the CLI at a profile file.
const EnvProfile = "STRATA_PROFILE"

// Profile is what the CLI reads when no flags or variables name endpoints.
type Profile struct {
	Metad   string `json:"metad"`
	Brokers string `json:"brokers,omitempty"` // bootstrap brokers, host:port,...
}

// ProfileFromState builds the profile of a running cluster.
func ProfileFromState(s *State) Profile {
	return Profile{
		Metad:   strings.Join(Endpoints(s.Nodes, RoleMetad), ","),
		Brokers: strings.Join(Endpoints(s.Nodes, RoleBroker), ","),
	}
}

// UserProfilePath is $STRATA_PROFILE, else ~/.config/strata/profile.json.
func UserProfilePath() (string, error) {
	if p := os.Getenv(EnvProfile); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "strata", "profile.json"), nil
}

// WriteProfile writes p to path, creating its directory.
func WriteProfile(path string, p Profile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// LoadProfile reads the first profile found: $STRATA_PROFILE, then
// ./.strata/profile.json, then the user's. No profile is not an error.
func LoadProfile() (Profile, error) {
	var candidates []string
	if p := os.Getenv(EnvProfile); p != "" {
		candidates = append(candidates, p)
	} else {
		candidates = append(candidates, filepath.Join(".strata", "profile.json"))
		if p, err := UserProfilePath(); err == nil {
			candidates = append(candidates, p)
		}
	}
	for _, path := range candidates {
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return Profile{}, err
		}
		var p Profile
		if err := json.Unmarshal(data, &p); err != nil {
			return Profile{}, fmt.Errorf("profile %s: %w", path, err)
		}
		return p, nil
	}
	return Profile{}, nil
}
