package pgxx

import (
	"encoding/json"
	"fmt"
)

// PlanNode is one node of an EXPLAIN (FORMAT JSON) plan, with the fields the plan tests
// read (which relation, through which index).
type PlanNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	Plans     []PlanNode `json:"Plans"`
}

// PlanNodes flattens the output of EXPLAIN (FORMAT JSON) into its nodes, parents first.
func PlanNodes(plan string) ([]PlanNode, error) {
	var top []struct {
		Plan PlanNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &top); err != nil || len(top) != 1 {
		return nil, fmt.Errorf("pgxx: EXPLAIN output %q is not one JSON plan: %v", plan, err)
	}
	var all []PlanNode
	var walk func(n PlanNode)
	walk = func(n PlanNode) {
		all = append(all, n)
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(top[0].Plan)
	return all, nil
}

// PlanBuffers returns the shared buffers (hit and read) the whole statement of an
// EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) plan used.
func PlanBuffers(plan string) (int64, error) {
	var top []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &top); err != nil || len(top) != 1 {
		return 0, fmt.Errorf("pgxx: EXPLAIN output %q is not one JSON plan: %v", plan, err)
	}
	return top[0].Plan.Hit + top[0].Plan.Read, nil
}
