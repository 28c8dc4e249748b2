"""``deadline_review``: the demo's loan graph with a second gate, ``compliance_review``, for the deadline tests.

Their tasks wait at either gate (tests/graphs/langgraph.json gives each its own deadline policy). A task must
wait in a node its graph has: one whose node the graph lost may be decided, handed to or reminded of by nobody
(``approvals.abilities.node_gone_refusal``). The second gate is never reached by a run of this graph.
"""

from langgraph.graph import END, StateGraph

from demo.graphs.loan_approval import LoanState, human_review
from demo.graphs.loan_approval import make_graph as loan_graph


def make_graph() -> StateGraph[LoanState]:
    builder = loan_graph()
    builder.add_node("compliance_review", human_review)
    builder.add_edge("compliance_review", END)
    return builder
