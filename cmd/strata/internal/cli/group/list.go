package group

import (
	"fmt"
	"text/tabwriter"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

// listRow is one group of `strata group list --output json`.
type listRow struct {
	Group       string `json:"group"`
	State       string `json:"state"`
	Members     int32  `json:"members"`
	Coordinator string `json:"coordinator"`
}

// PrintList prints groups: a table, or a JSON array.
func PrintList(p *cli.Printer, groups []*brokerpb.GroupSummary) error {
	if p.Format == cli.FormatJSON {
		rows := []listRow{}
		for _, gr := range groups {
			rows = append(rows, listRow{gr.GetGroupId(), gr.GetState(), gr.GetMembers(), gr.GetCoordinatorId()})
		}
		return p.JSON(rows)
	}
	tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tMEMBERS\tCOORDINATOR")
	for _, gr := range groups {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", gr.GetGroupId(), gr.GetState(), gr.GetMembers(), gr.GetCoordinatorId())
	}
	return tw.Flush()
}
