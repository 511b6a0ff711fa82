"""`kubectl agentsaga ...`: the kubectl plugin (the `kubectl-agentsaga` console script; kubectl
runs any `kubectl-NAME` on PATH as `kubectl NAME`).

It only reads AgentRuns and patches their status through the `kubectl` it was run from, so it
acts with the caller's own credentials and RBAC, and the admission policy sees the caller:

    kubectl agentsaga runs                      AgentRuns of every namespace, one line each
    kubectl agentsaga plan RUN                  the staged plan: commit steps, tools, masked
                                                arguments, audiences, the plan hash
    kubectl agentsaga approve RUN --plan-hash H [--reason R]
                                                approve the plan you reviewed (its hash, as
                                                `plan` printed it) as you; a plan staged since
                                                is refused
    kubectl agentsaga reject RUN [--plan-hash H] [--reason R]
                                                reject it (the run is unwound)
    kubectl agentsaga trace RUN                 the run's trace id and links for Jaeger/Tempo

A subcommand is one function in `agentsaga.plugin.subcommands`, listed in `SUBCOMMANDS`.
"""
