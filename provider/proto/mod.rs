//! Sans-IO protocol machines (DESIGN.md §7).
