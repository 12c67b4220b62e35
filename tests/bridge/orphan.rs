//! Bridge scenarios for bend/orphan.bend (being written).
