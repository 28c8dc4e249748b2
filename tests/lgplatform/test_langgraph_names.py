"""Names of LangGraph's that the API spells out instead of importing (its import does not load LangGraph)."""

from langgraph.errors import UnknownInterruptError
from langgraph.graph import END

from lgplatform import services


def test_the_api_s_copies_of_langgraph_names_are_langgraph_s():
    assert services.END == END
    assert UnknownInterruptError.__name__ in services._RUN_ERROR_TYPES
