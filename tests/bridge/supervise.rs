//! Bridge scenarios for bend/supervise.bend (being written).
