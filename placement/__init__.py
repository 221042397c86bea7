"""Placement and failover (design §6): pools, blocklist, optimizer, placement controller
and admission webhook. Arrives with the placement issue; imports providers only."""
