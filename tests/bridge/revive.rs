//! Bridge scenarios for bend/revive.bend (being written).
