/// The object server: exported objects, their properties, the standard interfaces, and the
/// dispatch of incoming method calls to their handlers, with the replies.
extension ConnectionCore {
    final class ExportState {
        let object: ExportedObject
        var values: [String: [String: DBusValue]]
        init(_ object: ExportedObject) {
            self.object = object
            var values: [String: [String: DBusValue]] = [:]
            for iface in object.interfaces {
                var props: [String: DBusValue] = [:]
                for p in iface.properties { props[p.name.rawValue] = p.value }
                values[iface.name.rawValue] = props
            }
            self.values = values
        }

        func interface(_ name: String) -> ExportedInterface? {
            object.interfaces.first { $0.name.rawValue == name }
        }

        /// Readable properties of `iface` as `a{sv}`.
        func readableProperties(_ iface: ExportedInterface) -> DBusValue {
            var dict: [String: DBusValue] = [:]
            for p in iface.properties where p.access != .write {
                dict[p.name.rawValue] = p.current(stored: values[iface.name.rawValue]?[p.name.rawValue])
            }
            return .variantDictionary(dict)
        }
    }


    func export(_ object: ExportedObject, at path: ObjectPath) throws(DBusError) {
        guard !isClosed else { throw .disconnected }
        try object.validate()
        guard exports[path] == nil else { throw .invalidArgument("an object is already exported at \(path)") }
        let state = ExportState(object)
        exports[path] = state
        for manager in managers where manager != path && path.isDescendant(ofOrEqualTo: manager) {
            emit(manager, StandardInterface.objectManager, "InterfacesAdded", [.objectPath(path), interfacesAndProperties(state)])
        }
    }

    func unexport(_ path: ObjectPath) {
        guard let state = exports.removeValue(forKey: path) else { return }
        for manager in managers where manager != path && path.isDescendant(ofOrEqualTo: manager) {
            let names = [StandardInterface.introspectable, StandardInterface.properties] + state.object.interfaces.map(\.name.rawValue)
            emit(manager, StandardInterface.objectManager, "InterfacesRemoved", [.objectPath(path), .stringArray(names)])
        }
    }

    func addObjectManager(_ path: ObjectPath) { managers.insert(path) }
    func removeObjectManager(_ path: ObjectPath) { managers.remove(path) }

    private func interfacesAndProperties(_ state: ExportState) -> DBusValue {
        let empty = DBusValue.variantDictionary([:])
        var entries: [(key: DBusValue, value: DBusValue)] = [
            (.string(StandardInterface.introspectable), empty),
            (.string(StandardInterface.properties), empty),
        ]
        for iface in state.object.interfaces {
            entries.append((.string(iface.name.rawValue), state.readableProperties(iface)))
        }
        return .dictionary(key: Signature(unchecked: "s"), value: Signature(unchecked: "a{sv}"), entries)
    }

    /// Updates a stored property value and emits `PropertiesChanged` as declared.
    func updateProperty(_ path: ObjectPath, _ interface: InterfaceName, _ name: String, _ value: DBusValue) throws(DBusError) {
        guard let state = exports[path] else { throw .invalidArgument("no object exported at \(path)") }
        guard let iface = state.interface(interface.rawValue),
            let property = iface.properties.first(where: { $0.name.rawValue == name })
        else { throw .invalidArgument("no property \(interface).\(quoted(name)) at \(path)") }
        guard value.signatureString == property.signature.rawValue else {
            throw .invalidArgument("property \(name) has type \(property.signature), not \(value.signatureString)")
        }
        try value.validate()
        state.values[interface.rawValue, default: [:]][name] = value
        emitChanged(path, iface, property, value)
    }

    /// Updates several properties of one interface and emits one `PropertiesChanged` for all
    /// of them (those declared `.emits` with their values, `.invalidates` by name; none if
    /// every one is `.none`). All or nothing: nothing is stored when one is refused.
    func updateProperties(_ path: ObjectPath, _ interface: InterfaceName, _ updates: [(name: String, value: DBusValue)]) throws(DBusError) {
        guard let state = exports[path] else { throw .invalidArgument("no object exported at \(path)") }
        guard let iface = state.interface(interface.rawValue) else { throw .invalidArgument("no interface \(interface) at \(path)") }
        var checked: [(ExportedProperty, DBusValue)] = []
        for (name, value) in updates {
            guard let property = iface.properties.first(where: { $0.name.rawValue == name }) else {
                throw .invalidArgument("no property \(interface).\(quoted(name)) at \(path)")
            }
            guard value.signatureString == property.signature.rawValue else {
                throw .invalidArgument("property \(name) has type \(property.signature), not \(value.signatureString)")
            }
            try value.validate()
            checked.append((property, value))
        }
        var changed: [String: DBusValue] = [:]
        var invalidated: [String] = []
        for (property, value) in checked {
            state.values[interface.rawValue, default: [:]][property.name.rawValue] = value
            switch property.changeSignal {
            case .emits: changed[property.name.rawValue] = value
            case .invalidates: if !invalidated.contains(property.name.rawValue) { invalidated.append(property.name.rawValue) }
            case .none: break
            }
        }
        guard !changed.isEmpty || !invalidated.isEmpty else { return }
        emit(path, StandardInterface.properties, "PropertiesChanged",
             [.string(interface.rawValue), .variantDictionary(changed), .stringArray(invalidated)])
    }

    private func emitChanged(_ path: ObjectPath, _ iface: ExportedInterface, _ property: ExportedProperty, _ value: DBusValue) {
        switch property.changeSignal {
        case .none: return
        case .emits:
            emit(path, StandardInterface.properties, "PropertiesChanged",
                 [.string(iface.name.rawValue), .variantDictionary([property.name.rawValue: value]), .stringArray([])])
        case .invalidates:
            emit(path, StandardInterface.properties, "PropertiesChanged",
                 [.string(iface.name.rawValue), .variantDictionary([:]), .stringArray([property.name.rawValue])])
        }
    }

    /// Emits a signal from code that knows its names are valid.
    private func emit(_ path: ObjectPath, _ interface: String, _ member: String, _ arguments: [DBusValue]) {
        guard let message = try? OwnedMessage.signal(
            path: path, interface: InterfaceName(unchecked: interface), member: MemberName(unchecked: member),
            destination: nil, arguments: arguments)
        else { return }
        _ = try? send(message)
    }

    // MARK: Method calls

    func handleMethodCall(_ m: Message) {
        guard let path = m.path, let member = m.member else { return }
        let call = MethodCall(
            sender: m.sender ?? "", path: path, interface: m.interface, member: member,
            arguments: m.arguments, noReplyExpected: m.noReplyExpected, serial: m.serial)
        let interface = m.interface?.rawValue
        let object = exports[path]

        switch (interface, member.rawValue) {
        case (StandardInterface.introspectable, "Introspect"), (nil, "Introspect"):
            let children = childNames(of: path)
            guard object != nil || !children.isEmpty || path == .root || managers.contains(path) else {
                return replyError(call, DBusError.Names.unknownObject, "No such object path '\(path)'")
            }
            let xml = Introspection.xml(
                interfaces: object?.object.interfaces, isManager: managers.contains(path), children: children)
            return reply(call, [.string(xml)])
        case (StandardInterface.objectManager, "GetManagedObjects") where managers.contains(path):
            return reply(call, [managedObjects(under: path)])
        case (StandardInterface.properties, _):
            guard let object else {
                return replyError(call, DBusError.Names.unknownObject, "No such object path '\(path)'")
            }
            return handleProperties(call, object)
        default:
            break
        }

        guard let object else {
            return replyError(call, DBusError.Names.unknownObject, "No such object path '\(path)'")
        }
        let method: ExportedMethod
        if let interface {
            guard let iface = object.interface(interface) else {
                return replyError(call, DBusError.Names.unknownInterface, "No such interface '\(interface)' at '\(path)'")
            }
            guard let found = iface.methods.first(where: { $0.name == member }) else {
                return replyError(call, DBusError.Names.unknownMethod, "No such method '\(member)' in '\(interface)'")
            }
            method = found
        } else {
            guard let found = object.object.interfaces.lazy.flatMap(\.methods).first(where: { $0.name == member }) else {
                return replyError(call, DBusError.Names.unknownMethod, "No such method '\(member)' at '\(path)'")
            }
            method = found
        }
        guard m.signature == method.inputSignature else {
            return replyError(
                call, DBusError.Names.invalidArgs,
                "Method '\(member)' takes signature '\(method.inputSignature)', got '\(m.signature)'")
        }
        switch method.handler {
        case .immediate(let handler):
            do {
                let result = try handler(call)
                replyChecked(call, result, method.outputSignature)
            } catch {
                replyError(call, error)
            }
        case .async(let handler):
            guard let owner else { return }
            let output = method.outputSignature
            Task(executorPreference: loop) {
                do {
                    let result = try await handler(call)
                    await owner.finishCall(call, result: .success(result), output: output)
                } catch {
                    await owner.finishCall(call, result: .failure(error), output: output)
                }
            }
        }
    }

    /// Sends a handler's result, or `Failed` when it has the wrong signature.
    func replyChecked(_ call: MethodCall, _ values: [DBusValue], _ output: Signature) {
        var signature = ""
        for v in values { v.appendSignature(to: &signature) }
        guard signature == output.rawValue else {
            return replyError(call, DBusError.Names.failed,
                              "Method handler returned signature '\(signature)' instead of '\(output)'")
        }
        reply(call, values)
    }

    func reply(_ call: MethodCall, _ values: [DBusValue]) {
        guard !call.noReplyExpected, !isClosed else { return }
        do {
            let message = try OwnedMessage.methodReturn(
                replySerial: call.serial, destination: call.sender.isEmpty ? nil : call.sender, arguments: values)
            try send(message)
        } catch {
            // The handler's values were refused before marshalling: its fault, not the caller's.
            let text = error.message
            replyError(call, DBusError.Names.failed, "Method handler returned an invalid reply: \(text)")
        }
    }

    func replyError(_ call: MethodCall, _ error: any Error) {
        if error is WithheldReply { return }
        let (name, text) = DBusError.replyFields(for: error)
        replyError(call, name, text)
    }

    func replyError(_ call: MethodCall, _ name: String, _ text: String) {
        guard !call.noReplyExpected else { return }
        sendError(replySerial: call.serial, destination: call.sender.isEmpty ? nil : call.sender, name: name, text: text)
    }

    func sendError(replySerial: UInt32, destination: String?, name: String, text: String) {
        guard !isClosed, let message = try? OwnedMessage.error(
            replySerial: replySerial, destination: destination, name: name, text: text)
        else { return }
        _ = try? send(message)
    }

    private func childNames(of path: ObjectPath) -> [String] {
        var names = Set<String>()
        let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
        for candidate in Array(exports.keys) + Array(managers) where candidate.rawValue.hasPrefix(prefix) {
            let rest = candidate.rawValue.utf8.dropFirst(prefix.utf8.count)
            let element = rest.split(separator: UInt8(ascii: "/"), maxSplits: 1).first.map { String(decoding: $0, as: UTF8.self) }
            if let element, !element.isEmpty { names.insert(element) }
        }
        return names.sorted()
    }

    private func managedObjects(under manager: ObjectPath) -> DBusValue {
        var entries: [(key: DBusValue, value: DBusValue)] = []
        for (path, state) in exports.sorted(by: { $0.key < $1.key })
        where path != manager && path.isDescendant(ofOrEqualTo: manager) {
            entries.append((.objectPath(path), interfacesAndProperties(state)))
        }
        return .dictionary(key: Signature(unchecked: "o"), value: Signature(unchecked: "a{sa{sv}}"), entries)
    }

    /// The interface and the property a `Get` or `Set` names; nil once the error is replied.
    private func lookUpProperty(
        _ call: MethodCall, _ object: ExportState, _ ifaceName: String, _ name: String
    ) -> (ExportedInterface, ExportedProperty)? {
        guard let iface = object.interface(ifaceName) else {
            replyError(call, DBusError.Names.unknownInterface, "No such interface '\(ifaceName)'")
            return nil
        }
        guard let property = iface.properties.first(where: { $0.name.rawValue == name }) else {
            replyError(call, DBusError.Names.unknownProperty, "No such property '\(name)'")
            return nil
        }
        return (iface, property)
    }

    private func handleProperties(_ call: MethodCall, _ object: ExportState) {
        let args = call.arguments
        switch call.member.rawValue {
        case "Get":
            guard args.count == 2, let ifaceName = args[0].stringValue, let name = args[1].stringValue else {
                return replyError(call, DBusError.Names.invalidArgs, "Get takes (ss)")
            }
            guard let (_, property) = lookUpProperty(call, object, ifaceName, name) else { return }
            guard property.access != .write else {
                return replyError(call, DBusError.Names.accessDenied, "Property '\(name)' is not readable")
            }
            reply(call, [.variant(property.current(stored: object.values[ifaceName]?[name]))])
        case "GetAll":
            guard args.count == 1, let ifaceName = args[0].stringValue else {
                return replyError(call, DBusError.Names.invalidArgs, "GetAll takes (s)")
            }
            if ifaceName.isEmpty || ExportedObject.reservedInterfaces.contains(ifaceName) {
                // All standard interfaces have no properties; "" means all, which we do not merge.
                if ifaceName.isEmpty, object.object.interfaces.count == 1, let only = object.object.interfaces.first {
                    return reply(call, [object.readableProperties(only)])
                }
                return reply(call, [.variantDictionary([:])])
            }
            guard let iface = object.interface(ifaceName) else {
                return replyError(call, DBusError.Names.unknownInterface, "No such interface '\(ifaceName)'")
            }
            reply(call, [object.readableProperties(iface)])
        case "Set":
            guard args.count == 3, let ifaceName = args[0].stringValue, let name = args[1].stringValue,
                case .variant(let value) = args[2]
            else {
                return replyError(call, DBusError.Names.invalidArgs, "Set takes (ssv)")
            }
            guard let (iface, property) = lookUpProperty(call, object, ifaceName, name) else { return }
            guard property.access != .read else {
                return replyError(call, DBusError.Names.propertyReadOnly, "Property '\(name)' is read-only")
            }
            guard value.signatureString == property.signature.rawValue else {
                return replyError(call, DBusError.Names.invalidArgs,
                                  "Property '\(name)' has type '\(property.signature)', not '\(value.signatureString)'")
            }
            do {
                try property.onSet?(value, call)
            } catch {
                return replyError(call, error)
            }
            object.values[ifaceName, default: [:]][name] = value
            reply(call, [])
            emitChanged(call.path, iface, property, value)
        default:
            replyError(call, DBusError.Names.unknownMethod, "No such method '\(call.member)' in '\(StandardInterface.properties)'")
        }
    }

}
