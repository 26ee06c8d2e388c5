# bash completion for ancsd
_ancsd() {
    local cur prev words cword
    _init_completion || return
    local commands="pair run decode replay capture list action media status doctor report desktop"
    local command="" i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            pair|run|decode|replay|capture|list|action|media|status|doctor|report|desktop) command=${words[i]}; break ;;
        esac
    done
    case $prev in
        --format)
            [[ $command == capture ]] && COMPREPLY=($(compgen -W "btsnoop capture" -- "$cur")) || COMPREPLY=($(compgen -W "text json" -- "$cur"))
            return ;;
        --log-level) COMPREPLY=($(compgen -W "debug info warning error" -- "$cur")); return ;;
        --fifo|--config|--control|--output|-o|--mqtt-password-file|--mqtt-ca) _filedir; return ;;
        --control-group) COMPREPLY=($(compgen -g -- "$cur")); return ;;
        --mqtt) COMPREPLY=($(compgen -W "mqtt:// mqtts://" -- "$cur")); compopt -o nospace; return ;;
        --mqtt-discovery-prefix) COMPREPLY=($(compgen -W "homeassistant none" -- "$cur")); return ;;
        --mqtt-prefix) return ;;
        --record|--state-dir) _filedir -d; return ;;
        --replays) COMPREPLY=($(compgen -W "all unseen none" -- "$cur")); return ;;
        --accessory) COMPREPLY=($(compgen -W "keyboard remote none" -- "$cur")); return ;;
        --ignore-category) COMPREPLY=($(compgen -W "other incoming_call missed_call voicemail social schedule email news health_and_fitness business_and_finance location entertainment reserved" -- "$cur")); return ;;
        --only-app|--ignore-app) return ;;
        --adapter|--index) COMPREPLY=($(compgen -W "$(ls /sys/class/bluetooth 2>/dev/null)" -- "$cur")); return ;;
        --device|--fifo-mode|--bus|--name|--timeout|--handles|--duration|--count|--exec|--exec-timeout|--alive-check|--resubscribe-after) return ;;
    esac
    case $command in
        "") COMPREPLY=($(compgen -W "$commands --bus --help --version" -- "$cur")) ;;
        run) COMPREPLY=($(compgen -W "--format --fifo --fifo-mode --device --adapter --bus --no-acquire-notify --no-advertise --no-media --accessory --record --record-redact --control --control-group --only-app --ignore-app --ignore-category --replays --state-dir --alive-check --resubscribe-after --exec --exec-timeout --mqtt --mqtt-password-file --mqtt-ca --mqtt-prefix --mqtt-discovery-prefix --mqtt-actions --log-level --config --help" -- "$cur")) ;;
        pair) COMPREPLY=($(compgen -W "--name --timeout --adapter --accessory --yes --bus --help" -- "$cur")) ;;
        decode) [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--handles --to-capture --help" -- "$cur")) || _filedir ;;
        capture) COMPREPLY=($(compgen -W "--output --format --index --duration --count --handles --help" -- "$cur")) ;;
        replay) [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--format --device --replays --state-dir --only-app --ignore-app --ignore-category --help" -- "$cur")) || _filedir ;;
        list) COMPREPLY=($(compgen -W "--device --json --control --help" -- "$cur")) ;;
        action) COMPREPLY=($(compgen -W "positive negative --control --help" -- "$cur")) ;;
        media) COMPREPLY=($(compgen -W "play pause toggle next previous volume-up volume-down repeat shuffle skip-forward skip-backward like dislike bookmark --json --control --help" -- "$cur")) ;;
        status) COMPREPLY=($(compgen -W "--json --control --help" -- "$cur")) ;;
        doctor) COMPREPLY=($(compgen -W "--json --control --fifo --bus --help" -- "$cur")) ;;
        report) [[ $prev == --output || $prev == -o ]] && _filedir || COMPREPLY=($(compgen -W "--output --capture --control --fifo --help" -- "$cur")) ;;
        desktop) COMPREPLY=($(compgen -W "--control --bus --replay-settle --no-mpris --state-dir --log-level --help" -- "$cur")) ;;
    esac
}
complete -F _ancsd ancsd
