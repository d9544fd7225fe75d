#compdef flow

_flow_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _FLOW_COMPLETE=complete_zsh flow)
}

compdef _flow_completion flow
