public import DBus

/// The names of BlueZ's D-Bus API (BlueZ 5.66, doc/*-api.txt).
public enum BlueZ {
    /// bluetoothd's well-known bus name.
    public static let service: BusName = "org.bluez"
    public static let adapterInterface = "org.bluez.Adapter1"
    public static let deviceInterface = "org.bluez.Device1"
    public static let gattServiceInterface = "org.bluez.GattService1"
    public static let gattCharacteristicInterface = "org.bluez.GattCharacteristic1"
    public static let gattDescriptorInterface = "org.bluez.GattDescriptor1"
    public static let gattManagerInterface = "org.bluez.GattManager1"
    public static let agentManagerInterface = "org.bluez.AgentManager1"
    public static let advertisingManagerInterface = "org.bluez.LEAdvertisingManager1"
}
